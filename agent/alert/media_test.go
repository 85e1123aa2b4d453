package alert

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const mediaTypePath = "../../deploy/zabbix/autodiag-media.yaml"

// TestZabbixMediaType: the shipped media type is a Zabbix 6.0 export
// (which 6.0 imports as it is and 7.0 converts), one webhook whose
// parameters are the macros of exactly the members DecodeZabbix reads,
// and whose script posts each of them.
func TestZabbixMediaType(t *testing.T) {
	b, err := os.ReadFile(mediaTypePath)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Export struct {
			Version    string `yaml:"version"`
			Date       string `yaml:"date"`
			MediaTypes []struct {
				Name       string `yaml:"name"`
				Type       string `yaml:"type"`
				Parameters []struct {
					Name  string `yaml:"name"`
					Value string `yaml:"value"`
				} `yaml:"parameters"`
				Script           string `yaml:"script"`
				Timeout          string `yaml:"timeout"`
				Attempts         string `yaml:"attempts"`
				AttemptInterval  string `yaml:"attempt_interval"`
				Description      string `yaml:"description"`
				MessageTemplates []struct {
					EventSource   string `yaml:"event_source"`
					OperationMode string `yaml:"operation_mode"`
					Subject       string `yaml:"subject"`
					Message       string `yaml:"message"`
				} `yaml:"message_templates"`
			} `yaml:"media_types"`
		} `yaml:"zabbix_export"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	e := doc.Export
	if e.Version != "6.0" || len(e.MediaTypes) != 1 {
		t.Fatalf("version %q with %d media types", e.Version, len(e.MediaTypes))
	}
	mt := e.MediaTypes[0]
	if mt.Name != "autodiag" || mt.Type != "WEBHOOK" || mt.Timeout == "" {
		t.Fatalf("media type %q of type %q, timeout %q", mt.Name, mt.Type, mt.Timeout)
	}
	params := map[string]string{}
	for _, p := range mt.Parameters {
		if _, dup := params[p.Name]; dup {
			t.Fatalf("parameter %q twice", p.Name)
		}
		params[p.Name] = p.Value
	}
	macros := map[string]string{
		"event_id": "{EVENT.ID}", "event_value": "{EVENT.VALUE}", "event_name": "{EVENT.NAME}", "severity": "{EVENT.SEVERITY}",
		"host": "{HOST.HOST}", "host_ip": "{HOST.IP}", "trigger_id": "{TRIGGER.ID}", "tags": "{EVENT.TAGSJSON}",
	}
	rt := reflect.TypeFor[zabbixBody]()
	if rt.NumField() != len(macros) {
		t.Fatalf("the decoder reads %d members, the test knows %d", rt.NumField(), len(macros))
	}
	for i := range rt.NumField() {
		name := strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]
		if params[name] != macros[name] {
			t.Errorf("parameter %s = %q, want %q", name, params[name], macros[name])
		}
		if !regexp.MustCompile(`(?m)^\s*` + name + `: params\.` + name + `,?$`).MatchString(mt.Script) {
			t.Errorf("the script does not post %s", name)
		}
		if !macroRE.MatchString(macros[name]) {
			t.Errorf("macro %s would not be recognised as unexpanded", macros[name])
		}
	}
	for _, p := range []string{"url", "token", "http_proxy", "event_source", "event_update_status"} {
		if _, ok := params[p]; !ok {
			t.Errorf("parameter %s missing", p)
		}
	}
	for _, s := range []string{"new HttpRequest()", "JSON.stringify(body)", "'Authorization: Bearer '", "req.getStatus()"} {
		if !strings.Contains(mt.Script, s) {
			t.Errorf("the script lacks %s", s)
		}
	}
	modes := map[string]bool{}
	for _, m := range mt.MessageTemplates {
		if m.EventSource == "TRIGGERS" {
			modes[m.OperationMode] = true
		}
	}
	if !modes["PROBLEM"] || !modes["RECOVERY"] {
		t.Errorf("message templates for trigger problems and recoveries: %v", modes)
	}
}
