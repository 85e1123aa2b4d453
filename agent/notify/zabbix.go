package notify

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Zabbix's limits and action bits of event.acknowledge.
const (
	// ZabbixMessageMax is the longest acknowledgement message Zabbix
	// stores, in characters; notes are cut to it in bytes, which is never
	// more characters.
	ZabbixMessageMax = 2048
	zabbixAddMessage = 4
	zabbixSetSev     = 8
)

// Zabbix acknowledges the alert's Zabbix problem event with a message
// (event.acknowledge, action "add message", and "change severity" when
// severity is set), through the JSON-RPC API with an API token.
type Zabbix struct {
	httpSink
	token    credential
	severity int // -1: left alone
	// version is the server's, from the configuration or apiinfo.version
	// (asked once); it decides where the token goes.
	mu      sync.Mutex
	version string
	rpcID   int
}

// HasTarget implements Targeter: the event's alert names a Zabbix event.
func (z *Zabbix) HasTarget(ev Event) bool { return zabbixEventID(ev) != "" }

// zabbixEventID is the Zabbix problem event of ev's alert: the event id
// of an alert from Zabbix ({EVENT.ID} of the media type), else its
// zabbix_event_id reference.
func zabbixEventID(ev Event) string {
	a := alertOf(ev)
	if a == nil {
		return ""
	}
	if a.Source == "zabbix" && a.EventID != "" {
		return baseEventID(a.EventID)
	}
	return a.Refs.ZabbixEventID
}

// zabbixBearer says whether a server of version v takes the token in the
// Authorization header (6.4 and later; 7.2 refuses it in the body).
func zabbixBearer(v string) bool {
	major, minor, _ := strings.Cut(v, ".")
	minor, _, _ = strings.Cut(minor, ".")
	ma, _ := strconv.Atoi(major)
	mi, _ := strconv.Atoi(minor)
	return ma > 6 || ma == 6 && mi >= 4
}

type zabbixRequest struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params"`
	Auth    string `json:"auth,omitempty"`
	ID      int    `json:"id"`
}

type zabbixAnswer struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    string `json:"data"`
	} `json:"error"`
}

// call makes one JSON-RPC call; auth says whether it carries the token
// (apiinfo.version must not). A JSON-RPC error is permanent: it is about
// the request or the token's rights, which a retry does not change.
func (z *Zabbix) call(ctx context.Context, method string, params any, auth bool, out any) error {
	z.mu.Lock()
	z.rpcID++
	req := zabbixRequest{JSONRPC: "2.0", Method: method, Params: params, ID: z.rpcID}
	version := z.version
	z.mu.Unlock()
	h := http.Header{"Content-Type": {"application/json-rpc"}}
	if auth {
		if zabbixBearer(version) {
			h.Set("Authorization", "Bearer "+z.token.get())
		} else {
			req.Auth = z.token.get()
		}
	}
	var ans zabbixAnswer
	if err := z.apiCall(ctx, http.MethodPost, z.target(), h, req, &ans); err != nil {
		return err
	}
	if ans.Error != nil {
		return &SendError{Status: http.StatusOK, Permanent: true, Reason: ReasonAPIError,
			Detail: fmt.Sprintf("%s: %d %.200s", method, ans.Error.Code, ans.Error.Message+" "+ans.Error.Data)}
	}
	if out != nil {
		if err := json.Unmarshal(ans.Result, out); err != nil {
			return &decodeError{sink: z.name, err: err}
		}
	}
	return nil
}

// serverVersion is the configured version, else apiinfo.version's answer
// (remembered).
func (z *Zabbix) serverVersion(ctx context.Context) error {
	z.mu.Lock()
	known := z.version != ""
	z.mu.Unlock()
	if known {
		return nil
	}
	var v string
	if err := z.call(ctx, "apiinfo.version", []any{}, false, &v); err != nil {
		return err
	}
	z.mu.Lock()
	z.version = v
	z.mu.Unlock()
	return nil
}

// Send acknowledges the event's Zabbix problem with the note, once: an
// acknowledgement that already carries this delivery's mark (an earlier
// attempt whose answer was lost) is not written again.
func (z *Zabbix) Send(ctx context.Context, d Delivery) error {
	var ev Event
	if err := json.Unmarshal(d.Body, &ev); err != nil {
		return &SendError{Permanent: true}
	}
	id := zabbixEventID(ev)
	if id == "" {
		return &SendError{Permanent: true, Reason: ReasonNoTarget, Detail: "the event names no Zabbix event"}
	}
	if err := z.serverVersion(ctx); err != nil {
		return err
	}
	var events []struct {
		EventID      string `json:"eventid"`
		Acknowledges []struct {
			Message string `json:"message"`
		} `json:"acknowledges"`
	}
	err := z.call(ctx, "event.get", map[string]any{"eventids": []string{id}, "output": []string{"eventid"},
		"select_acknowledges": []string{"message"}}, true, &events)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		// Unknown to this token: the event is gone or the user lacks
		// read rights on its host.
		return &SendError{Status: http.StatusOK, Permanent: true, Reason: ReasonNoTarget, Detail: "event.get finds no event " + id}
	}
	mark := deliveryMark(d.ID)
	for _, a := range events[0].Acknowledges {
		if strings.Contains(a.Message, mark) {
			return nil
		}
	}
	params := map[string]any{"eventids": []string{id}, "action": zabbixAddMessage, "message": noteText(ev, ZabbixMessageMax)}
	if z.severity >= 0 {
		params["action"] = zabbixAddMessage | zabbixSetSev
		params["severity"] = z.severity
	}
	return z.call(ctx, "event.acknowledge", params, true, nil)
}

// zabbixSeverity is the number of a severity name, -1 for "".
func zabbixSeverity(name string) int {
	return slices.Index(zabbixSeverities, name)
}

var _ Targeter = (*Zabbix)(nil)
