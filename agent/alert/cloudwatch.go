package alert

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/autodiag/autodiag/agent/task"
)

// snsEnvelope is an SNS notification as SQS receives it without raw
// message delivery.
type snsEnvelope struct {
	Type      string `json:"Type"`
	MessageID string `json:"MessageId"`
	TopicArn  string `json:"TopicArn"`
	Subject   string `json:"Subject"`
	Message   string `json:"Message"`
	Timestamp string `json:"Timestamp"`
}

// cwAlarm is the alarm notification CloudWatch publishes to SNS.
type cwAlarm struct {
	AlarmName        string     `json:"AlarmName"`
	AlarmDescription *string    `json:"AlarmDescription"`
	AWSAccountID     string     `json:"AWSAccountId"`
	NewStateValue    string     `json:"NewStateValue"`
	NewStateReason   string     `json:"NewStateReason"`
	StateChangeTime  string     `json:"StateChangeTime"`
	Region           string     `json:"Region"`
	AlarmArn         string     `json:"AlarmArn"`
	OldStateValue    string     `json:"OldStateValue"`
	Trigger          *cwTrigger `json:"Trigger"`
}

type cwTrigger struct {
	MetricName string `json:"MetricName"`
	Namespace  string `json:"Namespace"`
	Dimensions []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"Dimensions"`
	Metrics []struct {
		MetricStat *struct {
			Metric struct {
				MetricName string `json:"MetricName"`
				Namespace  string `json:"Namespace"`
				Dimensions []struct {
					Name  string `json:"name"`
					Value string `json:"value"`
				} `json:"Dimensions"`
			} `json:"Metric"`
		} `json:"MetricStat"`
	} `json:"Metrics"`
}

// ebEvent is an EventBridge "CloudWatch Alarm State Change" event.
type ebEvent struct {
	Version    string   `json:"version"`
	ID         string   `json:"id"`
	DetailType string   `json:"detail-type"`
	Source     string   `json:"source"`
	Account    string   `json:"account"`
	Time       string   `json:"time"`
	Region     string   `json:"region"`
	Resources  []string `json:"resources"`
	Detail     struct {
		AlarmName string `json:"alarmName"`
		State     struct {
			Value     string `json:"value"`
			Reason    string `json:"reason"`
			Timestamp string `json:"timestamp"`
		} `json:"state"`
		PreviousState struct {
			Value string `json:"value"`
		} `json:"previousState"`
		Configuration struct {
			Description string `json:"description"`
			Metrics     []struct {
				MetricStat *struct {
					Metric struct {
						Namespace  string            `json:"namespace"`
						Name       string            `json:"name"`
						Dimensions map[string]string `json:"dimensions"`
					} `json:"metric"`
				} `json:"metricStat"`
			} `json:"metrics"`
		} `json:"configuration"`
	} `json:"detail"`
}

// EventBridge names of the alarm state change event.
const (
	ebDetailType = "CloudWatch Alarm State Change"
	ebSource     = "aws.cloudwatch"
)

// cwTime reads CloudWatch's timestamps: "2026-11-30T14:02:27.123+0000" in
// alarm notifications and state changes, RFC 3339 elsewhere.
func cwTime(s string) time.Time {
	for _, layout := range []string{"2006-01-02T15:04:05.000-0700", "2006-01-02T15:04:05-0700", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC()
		}
	}
	return time.Time{}
}

// DecodeCloudWatch reads a CloudWatch alarm state change in any of the
// shapes that reach a queue: an SNS notification wrapping the alarm
// (Type "Notification"), the alarm JSON itself (SNS raw message
// delivery), or an EventBridge "CloudWatch Alarm State Change" event.
// Only a transition into ALARM is an alert; OK and INSUFFICIENT_DATA are
// ignored with the reasons state_ok and insufficient_data. The event id
// is the alarm (ARN, else name) and the time of the state change, the
// same whichever way the change arrived.
func DecodeCloudWatch(body []byte) (Payload, error) {
	p := Payload{Source: SourceCloudWatch}
	if err := bodyError(body); err != nil {
		return p, err
	}
	var probe struct {
		Type       string `json:"Type"`
		DetailType string `json:"detail-type"`
		AlarmName  string `json:"AlarmName"`
	}
	if err := unmarshal(body, &probe, false); err != nil {
		return p, malformed(err)
	}
	switch {
	case probe.Type != "":
		var env snsEnvelope
		if err := unmarshal(body, &env, false); err != nil {
			return p, malformed(err)
		}
		if env.Type != "Notification" {
			return p, &task.Error{Reason: ReasonNotAnAlarm, Field: "Type", Detail: fmt.Sprintf("SNS message type %.32q", env.Type)}
		}
		if err := bodyError([]byte(env.Message)); err != nil {
			return p, err
		}
		return decodeAlarm(p, []byte(env.Message))
	case probe.DetailType != "":
		return decodeEventBridge(p, body)
	case probe.AlarmName != "":
		return decodeAlarm(p, body)
	}
	return p, &task.Error{Reason: ReasonNotAnAlarm, Detail: "neither an SNS notification, an alarm nor an EventBridge event"}
}

func decodeAlarm(p Payload, msg []byte) (Payload, error) {
	var a cwAlarm
	if err := unmarshal(msg, &a, false); err != nil {
		return p, &task.Error{Reason: ReasonNotAnAlarm, Field: "Message", Detail: jsonDetail(err)}
	}
	if a.AlarmName == "" || a.NewStateValue == "" {
		return p, &task.Error{Reason: ReasonNotAnAlarm, Field: "Message", Detail: "no AlarmName or NewStateValue"}
	}
	al := Received{
		Source:      SourceCloudWatch,
		Name:        a.AlarmName,
		Labels:      map[string]string{},
		Annotations: map[string]string{"reason": a.NewStateReason},
		Dimensions:  map[string]string{},
		StartsAt:    cwTime(a.StateChangeTime),
		Status:      StatusFiring,
	}
	if a.AlarmDescription != nil {
		al.Annotations["description"] = *a.AlarmDescription
	}
	setIf(al.Labels, "account", a.AWSAccountID)
	setIf(al.Labels, "region", a.Region)
	if t := a.Trigger; t != nil {
		setIf(al.Labels, "namespace", t.Namespace)
		setIf(al.Labels, "metric_name", t.MetricName)
		for _, d := range t.Dimensions {
			al.Dimensions[d.Name] = d.Value
		}
		// A metric-math alarm names its metrics in Metrics; the first
		// one with a metric gives the labels and dimensions.
		for _, m := range t.Metrics {
			if m.MetricStat == nil || len(al.Dimensions) > 0 {
				continue
			}
			setIf(al.Labels, "namespace", m.MetricStat.Metric.Namespace)
			setIf(al.Labels, "metric_name", m.MetricStat.Metric.MetricName)
			for _, d := range m.MetricStat.Metric.Dimensions {
				al.Dimensions[d.Name] = d.Value
			}
		}
	}
	return alarmState(p, al, a.NewStateValue, firstNonEmpty(a.AlarmArn, a.AlarmName), a.StateChangeTime)
}

func decodeEventBridge(p Payload, body []byte) (Payload, error) {
	var e ebEvent
	if err := unmarshal(body, &e, false); err != nil {
		return p, malformed(err)
	}
	if e.DetailType != ebDetailType || e.Source != ebSource {
		return p, &task.Error{Reason: ReasonNotAnAlarm, Field: "detail-type", Detail: fmt.Sprintf("%.64q from %.32q", e.DetailType, e.Source)}
	}
	d := e.Detail
	if d.AlarmName == "" || d.State.Value == "" {
		return p, &task.Error{Reason: ReasonNotAnAlarm, Field: "detail", Detail: "no alarmName or state.value"}
	}
	al := Received{
		Source:      SourceCloudWatch,
		Name:        d.AlarmName,
		Labels:      map[string]string{},
		Annotations: map[string]string{"reason": d.State.Reason},
		Dimensions:  map[string]string{},
		StartsAt:    cwTime(d.State.Timestamp),
		Status:      StatusFiring,
	}
	setIf(al.Annotations, "description", d.Configuration.Description)
	setIf(al.Labels, "account", e.Account)
	setIf(al.Labels, "region", e.Region)
	for _, m := range d.Configuration.Metrics {
		if m.MetricStat == nil {
			continue
		}
		setIf(al.Labels, "namespace", m.MetricStat.Metric.Namespace)
		setIf(al.Labels, "metric_name", m.MetricStat.Metric.Name)
		for k, v := range m.MetricStat.Metric.Dimensions {
			al.Dimensions[k] = v
		}
		break
	}
	arn := ""
	if len(e.Resources) > 0 {
		arn = e.Resources[0]
	}
	return alarmState(p, al, d.State.Value, firstNonEmpty(arn, d.AlarmName), d.State.Timestamp)
}

// alarmState ends the decode of one alarm: an alert for ALARM, an ignored
// item for the other states.
func alarmState(p Payload, al Received, state, alarm, changed string) (Payload, error) {
	switch state {
	case "ALARM":
	case "OK":
		p.Ignored = append(p.Ignored, Outcome{Reason: ReasonStateOK, Detail: al.Name})
		if alarm != "" {
			p.Cleared = append(p.Cleared, alarm)
		}
		return p, nil
	case "INSUFFICIENT_DATA":
		p.Ignored = append(p.Ignored, Outcome{Reason: ReasonInsufficientData, Detail: al.Name})
		return p, nil
	default:
		return p, &task.Error{Reason: ReasonNotAnAlarm, Field: "state", Detail: fmt.Sprintf("%.32q is not an alarm state", state)}
	}
	if !al.StartsAt.IsZero() {
		al.EventID = alarm + "@" + al.StartsAt.Format(time.RFC3339Nano)
	} else if changed != "" {
		al.EventID = alarm + "@" + changed
	}
	p.add(0, al)
	return p, nil
}

// AlarmOf is the alarm (ARN, else name) of a CloudWatch alert's event
// id, alarm@state-change-time: what an OK transition names it by.
func AlarmOf(eventID string) string {
	if i := strings.LastIndexByte(eventID, '@'); i > 0 {
		return eventID[:i]
	}
	return eventID
}

func setIf(m map[string]string, k, v string) {
	if v != "" {
		m[k] = v
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// Recognize tells a CloudWatch alarm that reached the task queue (through
// an SNS subscription, with or without raw delivery, or an EventBridge
// rule) from a task message. ok is false for anything that is not one of
// those shapes: the caller decodes it as a task, as before. A task
// message cannot be mistaken for one: tasks refuse unknown members, and
// each alarm shape is told by a member no task has (Type, detail-type,
// AlarmName). When ok is true, err is a refusal of the whole body (an SNS
// message that is not an alarm, say) with a reason, and the payload holds
// the alert or its ignored outcome otherwise.
func Recognize(body []byte) (Payload, bool, error) {
	if !looksLikeAlarm(body) {
		return Payload{}, false, nil
	}
	var probe struct {
		Type       string `json:"Type"`
		DetailType string `json:"detail-type"`
		AlarmName  string `json:"AlarmName"`
	}
	if err := unmarshal(body, &probe, false); err != nil {
		return Payload{}, false, nil
	}
	if probe.Type == "" && probe.DetailType == "" && probe.AlarmName == "" {
		return Payload{}, false, nil
	}
	p, err := DecodeCloudWatch(body)
	return p, true, err
}

// looksLikeAlarm is the cheap test every received message passes through:
// only a body naming one of the alarm shapes' members is parsed twice.
func looksLikeAlarm(body []byte) bool {
	return bytes.Contains(body, []byte(`"Type"`)) || bytes.Contains(body, []byte(`"detail-type"`)) || bytes.Contains(body, []byte(`"AlarmName"`))
}
