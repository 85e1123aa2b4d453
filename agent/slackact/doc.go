// Package slackact serves Slack's interactivity on the intake listener
// (POST /slack/interactions): the Approve/Deny buttons of an approval
// request and the 👍/👎 buttons of a report.
//
// Every request is checked before anything in it is read: Slack's v0
// signature (HMAC-SHA256 of "v0:<timestamp>:<body>" with the app's signing
// secret, compared in constant time), a timestamp within Window of now, a
// body within the intake's max_body. Then the pressing user's Slack id is
// matched against intake.slack.approvers (approve, deny) or
// intake.slack.feedback_users (feedback_good, feedback_wrong; empty =
// anyone Slack signed for). Each answer is counted in
// autodiag_slack_interactions_total{action,result}, and told to the
// person through the payload's response_url when there is one.
//
// Here: slackact.go (the handler), reply.go (the response_url reply).
package slackact
