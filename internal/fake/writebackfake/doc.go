// Package writebackfake holds stand-ins for the APIs autodiag writes
// back to, for tests: Zabbix JSON-RPC (6.0: the token in the body's auth;
// 7.0: only an Authorization: Bearer header, as 7.2 refuses auth in the
// body) with apiinfo.version, event.get and event.acknowledge; PagerDuty
// REST API v2 incidents by incident_key and their notes; Opsgenie Alert
// API v2 notes by alias; Slack Web API chat.postMessage with thread_ts.
// Each speaks its API's documented JSON, checks what the real one checks
// that a client could get wrong (where the token goes, the From and
// Accept headers, GenieKey, identifierType=alias, message limits),
// records every call, and can be told to answer every request with one
// status (SetStorm), to apply writes but lose their answers (Lose), or
// to hold writes until released (Hold).
package writebackfake
