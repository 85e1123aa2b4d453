package urlcheck

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		url   string
		rules Rules
		want  string // "" = accepted
	}{
		{"https://api.example.com/v1", Rules{}, ""},
		{"http://api.example.com/v1", Rules{}, "http is not allowed"},
		{"http://api.example.com/v1", Rules{AllowHTTP: true}, ""},
		{"http://127.0.0.1:8000/v1", Rules{AllowHTTPLoopback: true}, ""},
		{"http://10.0.0.5:8000/v1", Rules{AllowHTTPLoopback: true}, "http is not allowed"},
		{"https://user:pass@api.example.com/", Rules{}, "credentials"},
		{"ftp://api.example.com/", Rules{}, "https"},
		{"https://169.254.169.254/latest/meta-data", Rules{}, "metadata"},
		{"http://169.254.169.254/", Rules{AllowHTTP: true}, "metadata"},
		{"https://[fd00:ec2::254]/", Rules{}, "metadata"},
		{"https://169.254.10.1/", Rules{}, "link-local"},
		{"https://[::ffff:169.254.169.254]/", Rules{}, "metadata"},
		{"https://instance-data/", Rules{}, "metadata"},
		{"https://0.0.0.0/", Rules{}, "unspecified"},
		{"https://localhost/", Rules{DenyLoopback: true}, "loopback"},
		{"http://127.0.0.1:9464/v1/drain", Rules{AllowHTTP: true, Self: "127.0.0.1:9464"}, "admin"},
		{"http://localhost:9464/v1/drain", Rules{AllowHTTP: true, Self: "0.0.0.0:9464"}, "admin"},
		{"http://127.0.0.1:8080/hook", Rules{AllowHTTP: true, Self: "127.0.0.1:9464"}, ""},
		{"https:///nohost", Rules{}, "no host"},
		{"https://INSTANCE-DATA./latest", Rules{}, "metadata"},
		{"https://instance-data.ec2.internal./", Rules{}, "metadata"},
		{"http://metadata.google.internal/computeMetadata/v1/", Rules{AllowHTTP: true}, "metadata"},
		{"http://metadata/computeMetadata/v1/", Rules{AllowHTTP: true}, "metadata"},
		{"https://metadata.example.com/", Rules{}, ""},
		{"http://[::1]:9464/v1/drain", Rules{AllowHTTP: true, Self: "127.0.0.1:9464"}, "admin"},
		{"http://10.0.0.5:9464/v1/drain", Rules{AllowHTTP: true, Self: "10.0.0.5:9464"}, "admin"},
		{"https://agent.internal:9464/v1/drain", Rules{Self: "agent.internal:9464"}, "admin"},
		{"http://10.0.0.6:9464/v1/drain", Rules{AllowHTTP: true, Self: "10.0.0.5:9464"}, ""},
		{"http://[fe80::1]/", Rules{AllowHTTP: true}, "link-local"},
	}
	for _, tt := range tests {
		err := Check(tt.url, tt.rules)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.url, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: got %v, want %q", tt.url, err, tt.want)
		case err != nil && strings.Contains(err.Error(), tt.url):
			t.Errorf("%s: the error quotes the URL", tt.url)
		}
	}
}
