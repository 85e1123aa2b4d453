package awssecretsfake

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Defaults for the fake's account and region.
const (
	DefaultRegion  = "us-east-1"
	DefaultAccount = "123456789012"
)

// Targets the fake answers.
const (
	TargetGetSecretValue = "secretsmanager.GetSecretValue"
	TargetGetParameter   = "AmazonSSM.GetParameter"
)

// Call is one request the fake received.
type Call struct {
	Target         string // X-Amz-Target
	ID             string // SecretId or Name as sent
	WithDecryption bool   // GetParameter only
	SigningRegion  string // from the Authorization credential scope
	ErrorType      string // __type of the error answered; "" on success
}

type secret struct {
	name, arn string
	str       *string
	bin       []byte
	version   string
	created   time.Time
}

type param struct {
	name, arn, typ, value string
	modified              time.Time
}

// Server is the fake; it is an http.Handler (serve it with httptest).
type Server struct {
	region, account string

	mu      sync.Mutex
	secrets map[string]*secret // by name
	params  map[string]*param  // by name
	denied  map[string]bool    // by ARN
	calls   []Call
}

// Option configures a Server.
type Option func(*Server)

// WithRegion sets the region ARNs carry and requests must be signed for.
func WithRegion(r string) Option { return func(s *Server) { s.region = r } }

// WithAccount sets the account id ARNs carry.
func WithAccount(a string) Option { return func(s *Server) { s.account = a } }

// New returns an empty fake in DefaultRegion and DefaultAccount.
func New(opts ...Option) *Server {
	s := &Server{region: DefaultRegion, account: DefaultAccount,
		secrets: map[string]*secret{}, params: map[string]*param{}, denied: map[string]bool{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// PutSecretString stores a secret with a string value and returns its ARN.
func (s *Server) PutSecretString(name, value string) string {
	return s.putSecret(&secret{name: name, str: &value})
}

// PutSecretBinary stores a secret with a binary value and returns its ARN.
func (s *Server) PutSecretBinary(name string, value []byte) string {
	return s.putSecret(&secret{name: name, bin: append([]byte(nil), value...)})
}

func (s *Server) putSecret(sec *secret) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := sha256.Sum256([]byte(sec.name))
	// AWS appends a dash and six random characters to the name.
	suffix := strings.NewReplacer("+", "a", "/", "b").Replace(base64.StdEncoding.EncodeToString(sum[:])[:6])
	sec.arn = fmt.Sprintf("arn:aws:secretsmanager:%s:%s:secret:%s-%s", s.region, s.account, sec.name, suffix)
	sec.version = fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
	sec.created = time.Now().Truncate(time.Millisecond)
	s.secrets[sec.name] = sec
	return sec.arn
}

// PutParameter stores a parameter (a SecureString when secure, else a
// String) and returns its ARN.
func (s *Server) PutParameter(name, value string, secure bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	typ := "String"
	if secure {
		typ = "SecureString"
	}
	p := &param{name: name, typ: typ, value: value, modified: time.Now().Truncate(time.Millisecond),
		arn: fmt.Sprintf("arn:aws:ssm:%s:%s:parameter/%s", s.region, s.account, strings.TrimPrefix(name, "/"))}
	s.params[name] = p
	return p.arn
}

// Deny makes every read of the secret or parameter with this ARN fail with
// AccessDeniedException, as when the instance role is not granted it.
func (s *Server) Deny(arn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.denied[arn] = true
}

// Calls returns a copy of the requests received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// apiError is an error as the JSON 1.1 protocol returns it.
type apiError struct {
	typ    string
	msg    string
	msgKey string // "Message" (Secrets Manager) or "message"; "" sends no message
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	call := Call{Target: target}
	resp, aerr := s.serve(r, &call)
	if aerr != nil {
		call.ErrorType = aerr.typ
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	reqID := fmt.Sprintf("00000000-0000-4000-8000-%012x", len(s.calls))
	s.mu.Unlock()

	h := w.Header()
	h.Set("Content-Type", "application/x-amz-json-1.1")
	h.Set("X-Amzn-Requestid", reqID)
	if aerr != nil {
		body := map[string]string{"__type": aerr.typ}
		if aerr.msgKey != "" {
			body[aerr.msgKey] = aerr.msg
		}
		b, _ := json.Marshal(body)
		w.WriteHeader(http.StatusBadRequest) // every modeled error of both services is a client fault
		_, _ = w.Write(b)
		return
	}
	b, _ := json.Marshal(resp)
	_, _ = w.Write(b)
}

func (s *Server) serve(r *http.Request, call *Call) (any, *apiError) {
	var service string
	switch call.Target {
	case TargetGetSecretValue:
		service = "secretsmanager"
	case TargetGetParameter:
		service = "ssm"
	default:
		return nil, &apiError{typ: "UnknownOperationException"}
	}
	if r.Method != http.MethodPost {
		return nil, &apiError{typ: "UnknownOperationException"}
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/x-amz-json-1.1") {
		return nil, &apiError{typ: "SerializationException", msgKey: "message",
			msg: fmt.Sprintf("unsupported Content-Type %q", ct)}
	}
	region, aerr := s.checkAuth(r.Header.Get("Authorization"), service)
	call.SigningRegion = region
	if aerr != nil {
		return nil, aerr
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return nil, &apiError{typ: "SerializationException", msgKey: "message", msg: err.Error()}
	}
	switch call.Target {
	case TargetGetSecretValue:
		var in struct {
			SecretID     *string `json:"SecretId"`
			VersionID    *string `json:"VersionId"`
			VersionStage *string `json:"VersionStage"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, &apiError{typ: "SerializationException", msgKey: "Message", msg: "Start of structure or map found where not expected."}
		}
		if in.SecretID != nil {
			call.ID = *in.SecretID
		}
		return s.getSecretValue(call.ID, in.VersionID, in.VersionStage)
	default:
		var in struct {
			Name           *string `json:"Name"`
			WithDecryption *bool   `json:"WithDecryption"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			return nil, &apiError{typ: "SerializationException", msgKey: "message", msg: "Start of structure or map found where not expected."}
		}
		if in.Name != nil {
			call.ID = *in.Name
		}
		call.WithDecryption = in.WithDecryption != nil && *in.WithDecryption
		return s.getParameter(call.ID, call.WithDecryption)
	}
}

// checkAuth returns the credential scope's region, and an error unless the
// request is signed for service in the fake's region.
func (s *Server) checkAuth(auth, service string) (string, *apiError) {
	const algo = "AWS4-HMAC-SHA256 "
	rest, ok := strings.CutPrefix(auth, algo)
	if !ok {
		return "", &apiError{typ: "MissingAuthenticationTokenException", msgKey: "message", msg: "Missing Authentication Token"}
	}
	var scope []string
	for _, part := range strings.Split(rest, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "Credential="); ok {
			scope = strings.Split(v, "/") // AKID/date/region/service/aws4_request
		}
	}
	if len(scope) != 5 || scope[4] != "aws4_request" {
		return "", &apiError{typ: "IncompleteSignatureException", msgKey: "message",
			msg: "Authorization header requires 'Credential' parameter."}
	}
	region := scope[2]
	if region != s.region {
		return region, &apiError{typ: "InvalidSignatureException", msgKey: "message",
			msg: fmt.Sprintf("Credential should be scoped to a valid region, not '%s'. ", region)}
	}
	if scope[3] != service {
		return region, &apiError{typ: "InvalidSignatureException", msgKey: "message",
			msg: fmt.Sprintf("Credential should be scoped to correct service: '%s'. ", service)}
	}
	return region, nil
}

func (s *Server) getSecretValue(id string, versionID, stage *string) (any, *apiError) {
	if id == "" {
		return nil, &apiError{typ: "InvalidParameterException", msgKey: "Message",
			msg: "You must provide a value for the SecretId parameter."}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.secrets[id]
	if sec == nil {
		for _, c := range s.secrets {
			if c.arn == id {
				sec = c
			}
		}
	}
	if sec == nil || (versionID != nil && *versionID != sec.version) || (stage != nil && *stage != "AWSCURRENT") {
		return nil, &apiError{typ: "ResourceNotFoundException", msgKey: "Message",
			msg: "Secrets Manager can't find the specified secret."}
	}
	if s.denied[sec.arn] {
		return nil, accessDenied("secretsmanager:GetSecretValue", sec.arn, "Message")
	}
	out := map[string]any{
		"ARN": sec.arn, "Name": sec.name, "VersionId": sec.version,
		"VersionStages": []string{"AWSCURRENT"},
		"CreatedDate":   float64(sec.created.UnixMilli()) / 1000,
	}
	if sec.str != nil {
		out["SecretString"] = *sec.str
	} else {
		out["SecretBinary"] = base64.StdEncoding.EncodeToString(sec.bin)
	}
	return out, nil
}

func (s *Server) getParameter(name string, decrypt bool) (any, *apiError) {
	if name == "" {
		return nil, &apiError{typ: "ValidationException", msgKey: "message",
			msg: "1 validation error detected: Value null at 'name' failed to satisfy constraint: Member must not be null"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.params[name]
	if p == nil && strings.HasPrefix(name, "arn:") {
		for _, c := range s.params {
			if c.arn == name {
				p = c
			}
		}
	}
	if p == nil {
		return nil, &apiError{typ: "ParameterNotFound"}
	}
	if s.denied[p.arn] {
		return nil, accessDenied("ssm:GetParameter", p.arn, "message")
	}
	value := p.value
	if p.typ == "SecureString" && !decrypt {
		sum := sha256.Sum256([]byte(p.value))
		value = base64.StdEncoding.EncodeToString(append([]byte{1, 2, 2, 0}, sum[:]...))
	}
	return map[string]any{"Parameter": map[string]any{
		"ARN": p.arn, "DataType": "text", "Name": p.name, "Type": p.typ, "Value": value, "Version": 1,
		"LastModifiedDate": float64(p.modified.UnixMilli()) / 1000,
	}}, nil
}

func accessDenied(action, arn, msgKey string) *apiError {
	return &apiError{typ: "AccessDeniedException", msgKey: msgKey, msg: fmt.Sprintf(
		"User: arn:aws:sts::%s:assumed-role/autodiag/i-0123456789abcdef0 is not authorized to perform: %s on resource: %s because no identity-based policy allows the %s action",
		strings.Split(arn, ":")[4], action, arn, action)}
}
