package task

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"time"
)

// OriginKeyEnv names the environment variable whose value, when set,
// is the key material origin tokens are signed with, for fleets that
// want it apart from the Redis URL.
const OriginKeyEnv = "AUTODIAG_ORIGIN_KEY"

// DeriveOriginKey turns key material every agent of a fleet shares (the
// value of OriginKeyEnv, or the Redis URL with its password) into the key
// of origin tokens, so the material itself never signs anything.
func DeriveOriginKey(material string) []byte {
	m := hmac.New(sha256.New, []byte(material))
	m.Write([]byte("autodiag origin key v1"))
	return m.Sum(nil)
}

// SignOrigin is the origin token of t under key: an HMAC-SHA256 over the
// fields that make t this investigation's tool call (id, normalised host,
// diagnostic, params, parent, investigation, step, created_at), so a
// captured token fits no other task. Only the agent's own investigator
// signs; "" without a key.
func SignOrigin(key []byte, t *Task) string {
	if len(key) == 0 {
		return ""
	}
	host := t.Host
	if h, err := NormalizeHost(host); err == nil {
		host = h
	}
	params := t.Params
	if len(params) == 0 {
		// The message drops an empty map (omitempty): sign what arrives.
		params = nil
	}
	signed, _ := json.Marshal(struct {
		V             int               `json:"v"`
		ID            string            `json:"id"`
		Host          string            `json:"host"`
		Diagnostic    string            `json:"diagnostic"`
		Params        map[string]string `json:"params"`
		Origin        string            `json:"origin"`
		Parent        string            `json:"parent"`
		Investigation string            `json:"investigation"`
		Step          int               `json:"step"`
		CreatedAt     string            `json:"created_at"`
	}{1, t.ID, host, t.Diagnostic, params, t.Origin, t.Parent, t.Investigation, t.Step, t.CreatedAt.UTC().Format(time.RFC3339Nano)})
	m := hmac.New(sha256.New, key)
	m.Write(signed)
	return "v1." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verifyOrigin reports whether t carries the origin token key gives it.
func verifyOrigin(key []byte, t *Task) bool {
	want := SignOrigin(key, t)
	return want != "" && hmac.Equal([]byte(want), []byte(t.OriginToken))
}
