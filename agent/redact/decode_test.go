package redact

import (
	"strings"
	"testing"
)

// Secrets that only show once the text is URL-decoded or JSON-unescaped
// are replaced where their encoded bytes are, and the rest of the text
// keeps its encoding.
func TestRedactDecoded(t *testing.T) {
	r, err := New(DefaultRules(), nil)
	if err != nil {
		t.Fatal(err)
	}
	const gcp = "AIzaSyDq3Lw8Rn4Xt8Vm3Pq6Zs1Hy5Jd0Fc2Wg7"
	const npm = "npm_Zq9Lm4Xr2TpWm3Kp8Rt5QzLk8Vn3Qz7RwPt6"
	for _, tc := range []struct{ name, in, want string }{
		{"url-encoded query", "GET /cb?next=%2Fmaps%3Fkey%3D" + gcp + "%26z%3D1 200",
			"GET /cb?next=%2Fmaps%3Fkey%3D[REDACTED:gcp_api_key]%26z%3D1 200"},
		{"url-encoded password", "POST /login body=user%3Dbob%26password%3Dhunter2%21x HTTP/1.1",
			"POST /login body=user%3Dbob%26password%3D[REDACTED:secret_assignment] HTTP/1.1"},
		{"escaped json twice", `{"msg":"{\"cfg\":\"{\\\"npm\\\":\\\"` + npm + `\\\"}\"}"}`,
			`{"msg":"{\"cfg\":\"{\\\"npm\\\":\\\"[REDACTED:npm_access_token]\\\"}\"}"}`},
		{"json unicode escapes", `{"line":"\u003cpassword\u003eRz5Kq8Wn2Lt\u003c/password\u003e"}`,
			`{"line":"\u003cpassword\u003e[REDACTED:xml_secret]\u003c/password\u003e"}`},
		{"escapes without a secret", `{"path":"C:\\temp\\new","q":"a%20b"}`, `{"path":"C:\\temp\\new","q":"a%20b"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.RedactString(tc.in)
			if got != tc.want {
				t.Errorf("\n got %s\nwant %s", got, tc.want)
			}
			if strings.Contains(got, gcp[4:14]) || strings.Contains(got, npm[4:14]) || strings.Contains(got, "Rz5Kq8") {
				t.Errorf("secret left in %s", got)
			}
		})
	}
}

// A decoded position maps back to the whole escape it came from.
func TestDecodeLayerMapping(t *testing.T) {
	src := []byte(`a%3Db\u0041c`)
	dec, l := decodeOnce(src)
	if string(dec) != "a=bAc" {
		t.Fatalf("decoded %q", dec)
	}
	for _, tc := range []struct{ s, e, ws, we int }{
		{0, 1, 0, 1},   // a
		{1, 2, 1, 4},   // = from %3D
		{2, 3, 4, 5},   // b
		{3, 4, 5, 11},  // A from \u0041
		{1, 5, 1, 12},  // =bAc
		{4, 5, 11, 12}, // c
	} {
		if s, e := l.start(tc.s), l.end(tc.e); s != tc.ws || e != tc.we {
			t.Errorf("[%d,%d) -> [%d,%d), want [%d,%d)", tc.s, tc.e, s, e, tc.ws, tc.we)
		}
	}
}
