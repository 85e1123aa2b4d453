package alert

import (
	"os"
	"strings"
	"testing"
)

func TestDecodeRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		decode func([]byte) (Payload, error)
		body   string
		reason string
	}{
		{"am not json", DecodeAlertmanager, `{"version":"4",`, ReasonMalformed},
		{"am version 3", DecodeAlertmanager, `{"version":"3","alerts":[]}`, ReasonUnsupportedVersion},
		{"am no alerts", DecodeAlertmanager, `{"version":"4"}`, ReasonMalformed},
		{"am alerts not a list", DecodeAlertmanager, `{"version":"4","alerts":{}}`, ReasonMalformed},
		{"am duplicate member", DecodeAlertmanager, `{"version":"4","version":"4","alerts":[]}`, ReasonMalformed},
		{"am case variant", DecodeAlertmanager, `{"Version":"4","alerts":[]}`, ReasonUnsupportedVersion},
		{"invalid utf8", DecodeAlertmanager, "{\"version\":\"4\xff\"}", ReasonMalformed},
		{"zabbix unknown member", DecodeZabbix, `{"event_id":"1","hostname":"x"}`, ReasonMalformed},
		{"zabbix duplicate host", DecodeZabbix, `{"event_id":"1","host":"a","host":"b"}`, ReasonMalformed},
		{"zabbix tags not a list", DecodeZabbix, `{"event_id":"1","tags":"{\"a\":1}"}`, ReasonMalformed},
		{"zabbix tags object", DecodeZabbix, `{"event_id":"1","tags":{}}`, ReasonMalformed},
		{"zabbix event id object", DecodeZabbix, `{"event_id":{}}`, ReasonMalformed},
		{"generic unknown member", DecodeGeneric, `{"name":"x","hots":"a"}`, ReasonMalformed},
		{"generic scalar", DecodeGeneric, `"x"`, ReasonMalformed},
		{"generic two values", DecodeGeneric, `{} {}`, ReasonMalformed},
		{"cloudwatch subscription confirmation", DecodeCloudWatch, `{"Type":"SubscriptionConfirmation","Message":"x"}`, ReasonNotAnAlarm},
		{"cloudwatch sns not an alarm", DecodeCloudWatch, `{"Type":"Notification","Message":"hello"}`, ReasonNotAnAlarm},
		{"cloudwatch other event", DecodeCloudWatch, `{"detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","detail":{}}`, ReasonNotAnAlarm},
		{"cloudwatch unknown state", DecodeCloudWatch, `{"AlarmName":"a","NewStateValue":"MAYBE"}`, ReasonNotAnAlarm},
		{"cloudwatch plain object", DecodeCloudWatch, `{"host":"a"}`, ReasonNotAnAlarm},
		{"too large", DecodeGeneric, `"` + strings.Repeat("a", MaxBody) + `"`, ReasonTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.decode([]byte(tc.body))
			if err == nil {
				t.Fatal("accepted")
			}
			if got := Reason(err); got != tc.reason {
				t.Fatalf("reason %q, want %q (%v)", got, tc.reason, err)
			}
		})
	}
}

// TestAlertmanagerOneBadAlert: an alert that cannot be read, or breaks a
// limit, is rejected at its index and the others of the group still pass.
func TestAlertmanagerOneBadAlert(t *testing.T) {
	body := `{"version":"4","alerts":[
		{"status":"firing","labels":{"alertname":"A"},"startsAt":"2026-11-30T13:00:00Z","fingerprint":"f1"},
		{"status":"firing","labels":{"alertname":"B"},"startsAt":"not a time","fingerprint":"f2"},
		{"status":"pending","labels":{"alertname":"C"},"startsAt":"2026-11-30T13:00:00Z"},
		{"status":"firing","labels":{"alertname":"` + strings.Repeat("x", maxFieldLen+1) + `"},"startsAt":"2026-11-30T13:00:00Z"},
		{"status":"firing","labels":{"alertname":"E"}},
		{"status":"firing","labels":{"alertname":"F","instance":"h:1"},"startsAt":"2026-11-30T13:00:00Z"}
	]}`
	p, err := DecodeAlertmanager([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	var idx []int
	for _, it := range p.Items {
		idx = append(idx, it.Index)
	}
	if len(idx) != 2 || idx[0] != 0 || idx[1] != 5 {
		t.Fatalf("items at %v, want [0 5]", idx)
	}
	want := map[int]string{1: ReasonMalformedAlert, 2: ReasonMalformedAlert, 3: ReasonMalformedAlert, 4: ReasonMissingEventID}
	if len(p.Rejected) != len(want) {
		t.Fatalf("rejected %+v", p.Rejected)
	}
	for _, o := range p.Rejected {
		if want[o.Index] != o.Reason {
			t.Errorf("index %d: reason %q, want %q", o.Index, o.Reason, want[o.Index])
		}
	}
	// Without a fingerprint the id comes from the labels: stable across
	// resends, different for other labels.
	if id := p.Items[1].Alert.EventID; !strings.HasSuffix(id, "@2026-11-30T13:00:00Z") || strings.HasPrefix(id, "@") {
		t.Errorf("derived event id %q", id)
	}
}

func TestZabbixVariants(t *testing.T) {
	for _, tc := range []struct {
		name, body   string
		status, host string
		labels       int
		ignored      string
	}{
		{"numbers for strings", `{"event_id":42,"event_value":1,"host":"h","tags":null}`, StatusFiring, "h", 0, ""},
		{"all macros", `{"event_id":"{EVENT.ID}","event_value":"{EVENT.VALUE}","host":"{HOST.HOST}","tags":"{EVENT.TAGSJSON}"}`, "", "", 0, ""},
		{"recovery", `{"event_id":"7","event_value":"0","host":"h"}`, StatusResolved, "h", 0, ""},
		{"update event value", `{"event_id":"7","event_value":"2","host":"h"}`, "", "", 0, ReasonNotProblem},
		{"duplicate tag keeps first", `{"event_id":"7","tags":[{"tag":"a","value":"1"},{"tag":"a","value":"2"}]}`, StatusFiring, "", 1, ""},
		{"user macro host", `{"event_id":"7","host":"{$HOST.OVERRIDE}"}`, StatusFiring, "", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodeZabbix([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.ignored != "" {
				if len(p.Ignored) != 1 || p.Ignored[0].Reason != tc.ignored {
					t.Fatalf("ignored %+v, want %s", p.Ignored, tc.ignored)
				}
				return
			}
			if tc.status == "" {
				// An unexpanded event id leaves nothing to dedupe on.
				if len(p.Rejected) != 1 || p.Rejected[0].Reason != ReasonMissingEventID {
					t.Fatalf("rejected %+v", p.Rejected)
				}
				return
			}
			a := p.Items[0].Alert
			if a.Status != tc.status || a.Host != tc.host || len(a.Labels) != tc.labels {
				t.Fatalf("alert %+v", a)
			}
			if tc.labels == 1 && a.Labels["a"] != "1" {
				t.Fatalf("labels %v", a.Labels)
			}
		})
	}
}

// TestCloudWatchShapesAgree: the same state change through SNS and
// through EventBridge is one event (same id), so dedupe runs it once.
func TestCloudWatchShapesAgree(t *testing.T) {
	var ids []string
	for _, f := range []string{"sns_cloudwatch_alarm.json", "eventbridge_alarm.json"} {
		b, err := os.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := DecodeCloudWatch(b)
		if err != nil || len(p.Items) != 1 {
			t.Fatalf("%s: %v %+v", f, err, p)
		}
		a := p.Items[0].Alert
		if a.Dimensions["InstanceId"] != "i-0abc123def4567890" || a.Labels["namespace"] != "AWS/EC2" || a.Labels["metric_name"] != "StatusCheckFailed" {
			t.Errorf("%s: alert %+v", f, a)
		}
		ids = append(ids, a.EventID)
	}
	if ids[0] != ids[1] {
		t.Fatalf("event ids differ: %q vs %q", ids[0], ids[1])
	}
}

func TestCloudWatchRawDeliveryAndInsufficientData(t *testing.T) {
	p, err := DecodeCloudWatch([]byte(`{"AlarmName":"cpu","NewStateValue":"INSUFFICIENT_DATA","StateChangeTime":"2026-11-30T14:00:05.123+0000"}`))
	if err != nil || len(p.Ignored) != 1 || p.Ignored[0].Reason != ReasonInsufficientData {
		t.Fatalf("%v %+v", err, p)
	}
	p, err = DecodeCloudWatch([]byte(`{"AlarmName":"cpu","NewStateValue":"ALARM","StateChangeTime":"2026-11-30T14:00:05.123+0000",
		"Trigger":{"Metrics":[{"Id":"e1","Expression":"m1*100"},{"Id":"m1","MetricStat":{"Metric":{"Namespace":"AWS/EC2","MetricName":"CPUUtilization","Dimensions":[{"name":"AutoScalingGroupName","value":"web"}]}}}]}}`))
	if err != nil || len(p.Items) != 1 {
		t.Fatalf("%v %+v", err, p)
	}
	if a := p.Items[0].Alert; a.Dimensions["AutoScalingGroupName"] != "web" || a.EventID != "cpu@2026-11-30T14:00:05.123Z" {
		t.Fatalf("alert %+v", a)
	}
}

func TestRecognize(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   string
		ok     bool
		reason string
		items  int
	}{
		{"task", `{"host":"web-01","diagnostic":"uptime"}`, false, "", 0},
		{"task mentioning Type in a param", `{"host":"web-01","diagnostic":"x","params":{"q":"\"Type\""}}`, false, "", 0},
		{"malformed", `{"Type":`, false, "", 0},
		{"sns alarm", mustRead(t, "sns_cloudwatch_alarm.json"), true, "", 1},
		{"sns ok", mustRead(t, "sns_cloudwatch_ok.json"), true, "", 0},
		{"eventbridge", mustRead(t, "eventbridge_alarm.json"), true, "", 1},
		{"sns other message", `{"Type":"Notification","Message":"{\"host\":\"a\"}"}`, true, ReasonNotAnAlarm, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok, err := Recognize([]byte(tc.body))
			if ok != tc.ok || Reason(err) != tc.reason || len(p.Items) != tc.items {
				t.Fatalf("ok %v err %v items %d; want ok %v reason %q items %d", ok, err, len(p.Items), tc.ok, tc.reason, tc.items)
			}
		})
	}
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGenericList(t *testing.T) {
	p, err := DecodeGeneric([]byte(`[
		{"name":"a","host":"h1","labels":{"x":"1"}},
		{"name":"b","host":"h2","bogus":1},
		{"source":"Nagios!","name":"c"},
		{"source":"nagios","name":"d","event_id":"n-1","status":"resolved"}
	]`))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Items) != 2 || len(p.Rejected) != 2 {
		t.Fatalf("%+v", p)
	}
	a, d := p.Items[0].Alert, p.Items[1].Alert
	if a.Source != SourceGeneric || a.EventID == "" || d.Source != "nagios" || d.EventID != "n-1/resolved" || d.Status != StatusResolved {
		t.Fatalf("%+v %+v", a, d)
	}
	again, _ := DecodeGeneric([]byte(`{"name":"a","host":"h1","labels":{"x":"1"}}`))
	if again.Items[0].Alert.EventID != a.EventID {
		t.Fatal("a resent generic alert has a new derived event id")
	}
}

func TestDecodeBySource(t *testing.T) {
	for _, src := range []string{SourceAlertmanager, SourceZabbix, SourceCloudWatch, SourceGeneric} {
		if _, ok, _ := Decode(src, []byte(`{}`)); !ok {
			t.Errorf("%s: no decoder", src)
		}
	}
	if _, ok, _ := Decode("nagios", []byte(`{}`)); ok {
		t.Error("a decoder for an unknown source")
	}
}
