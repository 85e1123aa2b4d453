package alert

import (
	"os"
	"path/filepath"
	"testing"
)

// fuzzDecoder checks what every decoder promises, whatever the body: no
// panic; a refusal carries a reason; otherwise each alert of the payload
// ends exactly once (an item, or ignored, or rejected, at a distinct
// index), no payload holds more alerts than the body has bytes, every
// alert has an event id, and routing it makes only tasks that passed
// validation.
func fuzzDecoder(f *testing.F, decode func([]byte) (Payload, error), seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	files, _ := filepath.Glob("testdata/*.json")
	for _, fn := range files {
		if b, err := os.ReadFile(fn); err == nil {
			f.Add(b)
		}
	}
	r := testRouter(f)
	v := testValidator(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decode(body)
		if err != nil {
			if Reason(err) == "" {
				t.Fatalf("refusal without a reason: %v", err)
			}
			return
		}
		seen := map[int]bool{}
		mark := func(i int) {
			if seen[i] {
				t.Fatalf("index %d ends twice: %+v", i, p)
			}
			seen[i] = true
		}
		for _, it := range p.Items {
			mark(it.Index)
			if it.Alert.EventID == "" {
				t.Fatalf("alert without an event id: %+v", it.Alert)
			}
		}
		for _, o := range append(append([]Outcome{}, p.Ignored...), p.Rejected...) {
			mark(o.Index)
			if o.Reason == "" {
				t.Fatalf("outcome without a reason: %+v", o)
			}
		}
		if len(seen) > len(body) {
			t.Fatalf("%d alerts from %d bytes", len(seen), len(body))
		}
		ans := r.RoutePayload(p, goldenNow)
		if ans.Accepted+len(ans.Ignored)+len(ans.Rejected) != len(seen) {
			t.Fatalf("answer %+v does not account for %d alerts", ans, len(seen))
		}
		for _, tk := range ans.Tasks {
			if err := v.Validate(&tk, goldenNow); err != nil {
				t.Fatalf("routed task fails validation: %v", err)
			}
		}
	})
}

// go test ./agent/alert -run '^$' -fuzz FuzzDecodeAlertmanager -fuzztime 60s
func FuzzDecodeAlertmanager(f *testing.F) {
	fuzzDecoder(f, DecodeAlertmanager,
		`{"version":"4","truncatedAlerts":-3,"alerts":[{"status":"firing","labels":{"alertname":"DiskSpaceLow","severity":"critical","instance":"a:1","mountpoint":"/x"},"startsAt":"2026-11-30T13:00:00Z"}]}`,
		`{"version":"4","alerts":[{},[],1,{"status":"resolved"}]}`)
}

// go test ./agent/alert -run '^$' -fuzz FuzzDecodeZabbix -fuzztime 60s
func FuzzDecodeZabbix(f *testing.F) {
	fuzzDecoder(f, DecodeZabbix,
		`{"event_id":"1","event_value":"1","event_name":"Disk space low","host":"h","tags":"[{\"tag\":\"filesystem\",\"value\":\"/\"}]"}`,
		`{"event_id":1,"tags":"{EVENT.TAGSJSON}","host_ip":"{HOST.IP}"}`,
		`{"tags":"\"[]\""}`)
}

// go test ./agent/alert -run '^$' -fuzz FuzzDecodeCloudWatch -fuzztime 60s
func FuzzDecodeCloudWatch(f *testing.F) {
	fuzzDecoder(f, DecodeCloudWatch,
		`{"Type":"Notification","Message":"{\"AlarmName\":\"StatusCheckFailed\",\"NewStateValue\":\"ALARM\",\"Trigger\":{\"Dimensions\":[{\"name\":\"InstanceId\",\"value\":\"i-1\"}]}}"}`,
		`{"AlarmName":"a","NewStateValue":"ALARM","StateChangeTime":"x"}`)
}

// go test ./agent/alert -run '^$' -fuzz FuzzRecognize -fuzztime 60s
func FuzzRecognize(f *testing.F) {
	fuzzDecoder(f, func(b []byte) (Payload, error) {
		p, ok, err := Recognize(b)
		if !ok && (err != nil || len(p.Items)+len(p.Ignored)+len(p.Rejected) > 0) {
			panic("a body that is not an alarm produced alarm results")
		}
		return p, err
	}, `{"host":"web-01","diagnostic":"uptime"}`)
}

// go test ./agent/alert -run '^$' -fuzz FuzzDecodeGeneric -fuzztime 60s
func FuzzDecodeGeneric(f *testing.F) {
	fuzzDecoder(f, DecodeGeneric,
		`{"name":"disk space low","host":"web-01","labels":{"filesystem":"/"}}`,
		`[{"name":"a"},{"source":"x","event_id":"1","status":"resolved"},1]`)
}
