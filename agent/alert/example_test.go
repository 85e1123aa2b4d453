package alert_test

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/autodiag/autodiag/agent/alert"
)

// The README's routes, applied to one Alertmanager alert.
func ExampleRouter_RoutePayload() {
	var routes alert.Routes
	if err := yaml.Unmarshal([]byte(`
- name: disk-full
  match:
    source: [alertmanager, zabbix]
    name: '(?i)disk.*(full|space)'
    labels: {severity: '^(critical|high)$'}
  host: '{{ .Labels.instance | trimPort }}'
  severity: '{{ .Labels.severity }}'
  tasks:
    - diagnostic: disk-usage
      params: {mount: '{{ .Labels.mountpoint | default "/" }}'}
`), &routes); err != nil {
		panic(err)
	}
	r, err := alert.NewRouter(routes, nil)
	if err != nil {
		panic(err)
	}
	p, err := alert.DecodeAlertmanager([]byte(`{"version":"4","alerts":[
	  {"status":"firing","fingerprint":"5f2a","startsAt":"2026-11-30T13:58:12Z",
	   "labels":{"alertname":"DiskSpaceFull","instance":"web-01:9100","severity":"critical"}},
	  {"status":"firing","fingerprint":"77b0","startsAt":"2026-11-30T13:58:12Z",
	   "labels":{"alertname":"HighLatency","severity":"critical"}}]}`))
	if err != nil {
		panic(err)
	}
	ans := r.RoutePayload(p, time.Now())
	for _, t := range ans.Tasks {
		fmt.Println(t.Host, t.Diagnostic, t.Params["mount"], t.Severity, t.Alert.EventID)
	}
	fmt.Printf("accepted %d, ignored %+v\n", ans.Accepted, ans.Ignored)
	// Output:
	// web-01 disk-usage / critical 5f2a@2026-11-30T13:58:12Z
	// accepted 1, ignored [{Index:1 Reason:no_route Detail:}]
}
