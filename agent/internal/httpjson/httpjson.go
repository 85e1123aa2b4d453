// Package httpjson writes the JSON answers of the agent's admin API and of
// the standalone alert listener's admin API, in one format.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers with code and v as indented JSON.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
