package asgfake

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Namespace is the XML namespace of Auto Scaling responses.
const Namespace = "http://autoscaling.amazonaws.com/doc/2011-01-01/"

// APIVersion is the only Version parameter accepted.
const APIVersion = "2011-01-01"

// Lifecycle transitions and results.
const (
	TransitionTerminating = "autoscaling:EC2_INSTANCE_TERMINATING"
	TransitionLaunching   = "autoscaling:EC2_INSTANCE_LAUNCHING"
	ResultContinue        = "CONTINUE"
	ResultAbandon         = "ABANDON"
)

// Origins and destinations of a lifecycle action (Action.Origin,
// Action.Destination, and the notices' fields of the same names).
const (
	PlaceEC2      = "EC2"
	PlaceGroup    = "AutoScalingGroup"
	PlaceWarmPool = "WarmPool"
)

// Warm pool states an instance rests in (SetWarmPool), and the state
// Launch gives an instance without launching hooks.
const (
	WarmedStopped    = "Warmed:Stopped"
	WarmedRunning    = "Warmed:Running"
	WarmedHibernated = "Warmed:Hibernated"
	stateInService   = "InService"
)

// Reasons an action ended (Action.EndReason).
const (
	EndCompleted        = "completed"
	EndHeartbeatTimeout = "heartbeat_timeout"
	EndGlobalTimeout    = "global_timeout"
)

// MaxGlobalTimeout caps the global timeout of any action.
const MaxGlobalTimeout = 48 * time.Hour

// Options configure a Server.
type Options struct {
	// Now is the clock; nil = time.Now.
	Now func() time.Time
	// Seed makes tokens, request ids and probabilistic faults reproducible.
	Seed uint64
	// Notify, when set, receives what Auto Scaling would send to a hook's
	// notification target: the direct JSON of every lifecycle action when an
	// instance enters a wait state (whatever the hook's target, so a test can
	// route it to a queue), and autoscaling:TEST_NOTIFICATION when a hook
	// with a NotificationTargetARN is put. Called synchronously from the call
	// that caused it, without locks held.
	Notify func(body string)
	// VisibleAfter hides each action from RecordLifecycleActionHeartbeat and
	// CompleteLifecycleAction (they answer "No active Lifecycle Action
	// found") for this long after it starts, as the real API can lag what
	// instance metadata already shows. 0 = visible at once.
	VisibleAfter time.Duration
}

// Hook is a lifecycle hook of a group.
type Hook struct {
	Group                 string
	Name                  string
	Transition            string        // default autoscaling:EC2_INSTANCE_TERMINATING
	HeartbeatTimeout      time.Duration // default 1h (the API default)
	DefaultResult         string        // default ABANDON (the API default)
	NotificationTargetARN string
	NotificationMetadata  string
}

// GlobalTimeout is min(48h, 100 × HeartbeatTimeout).
func (h Hook) GlobalTimeout() time.Duration {
	return min(MaxGlobalTimeout, 100*h.HeartbeatTimeout)
}

// Action is a lifecycle action, as recorded by the fake.
type Action struct {
	InstanceID     string
	Group          string
	Hook           string
	Token          string
	Transition     string
	Origin         string // EC2 | AutoScalingGroup | WarmPool
	Destination    string // AutoScalingGroup | WarmPool | EC2
	Started        time.Time
	LastHeartbeat  time.Time // zero until the first heartbeat
	Heartbeats     int       // accepted heartbeats
	Deadline       time.Time // heartbeat timeout expiry (never past GlobalDeadline)
	GlobalDeadline time.Time
	Ended          bool
	EndedAt        time.Time
	EndReason      string // completed | heartbeat_timeout | global_timeout
	Result         string // CONTINUE | ABANDON (DefaultResult on a timeout)
	Completions    int    // successful CompleteLifecycleAction calls (at most 1)
}

// Call is one request received, recorded in arrival order.
type Call struct {
	At       time.Time
	Op       string
	Params   url.Values
	Status   int
	Result   string // "ok" or the error code
	Message  string // error message
	Injected bool   // the result came from an injected fault
	Applied  bool   // the operation took effect (ok, or a fault with AfterApply)
}

// Fault is an error injected into matching calls.
type Fault struct {
	// Op restricts the fault to one operation; "" = every operation.
	Op string
	// Code is the error code: Throttling (HTTP 400, what the SDK's retryer
	// treats as throttling), InternalFailure (500), ServiceUnavailable (503),
	// or any other (400).
	Code string
	// Probability of failing a matching call (0 = always).
	Probability float64
	// Count limits the number of injected failures (0 = unlimited).
	Count int
	// AfterApply lets the operation take effect before answering with the
	// error, like a response lost on the way back.
	AfterApply bool
}

type fault struct {
	Fault
	injected int
}

type group struct {
	name      string
	az        string
	instances []string
	hooks     map[string]*Hook
	warmState string // the warm pool's resting state, Warmed:Stopped by default
}

type instance struct {
	id    string
	group string
	state string // InService, Terminating:Wait, Terminating:Proceed, ...
}

// Server is the fake service; it implements http.Handler.
type Server struct {
	now          func() time.Time
	notify       func(string)
	visibleAfter time.Duration

	mu        sync.Mutex
	rng       *rand.Rand
	reqs      int
	groups    map[string]*group
	instances map[string]*instance
	actions   []*Action
	calls     []Call
	faults    []*fault
	pending   []string // notifications to send once the lock is released
}

// New returns an empty service.
func New(o Options) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Server{
		now: o.Now, notify: o.Notify, visibleAfter: o.VisibleAfter,
		rng:    rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)),
		groups: map[string]*group{}, instances: map[string]*instance{},
	}
}

// AddGroup creates an empty Auto Scaling group (no-op if it exists).
func (s *Server) AddGroup(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.groups[name]; !ok {
		s.groups[name] = &group{name: name, az: "us-east-1a", hooks: map[string]*Hook{}, warmState: WarmedStopped}
	}
}

// SetWarmPool sets the state the group's warm pool keeps instances in:
// WarmedStopped (the API default), WarmedRunning or WarmedHibernated.
func (s *Server) SetWarmPool(groupName, state string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.groups[groupName]
	if !ok {
		return fmt.Errorf("asgfake: no group %q", groupName)
	}
	switch state {
	case WarmedStopped, WarmedRunning, WarmedHibernated:
	default:
		return fmt.Errorf("asgfake: warm pool state %q is not one of %s, %s, %s", state, WarmedStopped, WarmedRunning, WarmedHibernated)
	}
	g.warmState = state
	return nil
}

// Launch starts a new instance as a scale-out would, into the group
// (destination PlaceGroup) or into its warm pool (PlaceWarmPool): with
// launching hooks it waits in Pending:Wait (Warmed:Pending:Wait) with one
// action per hook (returned); without, it goes straight to InService (the
// warm pool's state). CONTINUE moves it on the same way; ABANDON, or a
// timeout with DefaultResult ABANDON, terminates it.
func (s *Server) Launch(groupName, instanceID, destination string) ([]Action, error) {
	s.mu.Lock()
	acts, err := s.launch(groupName, instanceID, destination)
	pending := s.takePending()
	s.mu.Unlock()
	s.send(pending)
	return acts, err
}

func (s *Server) launch(groupName, instanceID, destination string) ([]Action, error) {
	s.expire()
	g, ok := s.groups[groupName]
	if !ok {
		return nil, fmt.Errorf("asgfake: no group %q", groupName)
	}
	if _, ok := s.instances[instanceID]; ok {
		return nil, fmt.Errorf("asgfake: instance %s already exists", instanceID)
	}
	if destination != PlaceGroup && destination != PlaceWarmPool {
		return nil, fmt.Errorf("asgfake: launch destination %q is neither %s nor %s", destination, PlaceGroup, PlaceWarmPool)
	}
	in := &instance{id: instanceID, group: groupName}
	s.instances[instanceID] = in
	g.instances = append(g.instances, instanceID)
	return s.startActions(g, in, TransitionLaunching, PlaceEC2, destination), nil
}

// LeaveWarmPool moves a warmed instance into the group as a scale-out
// served from the warm pool does: it goes through the launching hooks
// again (origin WarmPool, destination AutoScalingGroup).
func (s *Server) LeaveWarmPool(instanceID string) ([]Action, error) {
	s.mu.Lock()
	s.expire()
	in, ok := s.instances[instanceID]
	var acts []Action
	var err error
	switch {
	case !ok:
		err = fmt.Errorf("asgfake: no instance %s", instanceID)
	case !strings.HasPrefix(in.state, "Warmed:") || strings.Contains(in.state, ":Wait") || strings.Contains(in.state, "Terminat"):
		err = fmt.Errorf("asgfake: instance %s is %s, not resting in the warm pool", instanceID, in.state)
	default:
		acts = s.startActions(s.groups[in.group], in, TransitionLaunching, PlaceWarmPool, PlaceGroup)
	}
	pending := s.takePending()
	s.mu.Unlock()
	s.send(pending)
	return acts, err
}

// startActions puts in into the wait state of transition with one action
// per hook of it (each announced through Notify), or straight past it when
// the group has no such hook.
func (s *Server) startActions(g *group, in *instance, transition, origin, destination string) []Action {
	now := s.now()
	var out []Action
	names := make([]string, 0, len(g.hooks))
	for name := range g.hooks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := g.hooks[name]
		if h.Transition != transition {
			continue
		}
		a := &Action{
			InstanceID: in.id, Group: g.name, Hook: h.Name, Token: s.uuid(), Transition: h.Transition,
			Origin: origin, Destination: destination, Started: now, GlobalDeadline: now.Add(h.GlobalTimeout()),
		}
		a.Deadline = minTime(now.Add(h.HeartbeatTimeout), a.GlobalDeadline)
		s.actions = append(s.actions, a)
		out = append(out, *a)
		if h.NotificationTargetARN != "" || s.notify != nil {
			s.pending = append(s.pending, mustJSON(map[string]string{
				"Origin": origin, "Destination": destination, "Service": "AWS Auto Scaling",
				"Time": now.UTC().Format(time.RFC3339Nano), "RequestId": s.requestID(), "AccountId": "123456789012",
				"AutoScalingGroupName": g.name, "LifecycleHookName": h.Name, "LifecycleActionToken": a.Token,
				"EC2InstanceId": in.id, "LifecycleTransition": h.Transition,
				"NotificationMetadata": h.NotificationMetadata,
			}))
		}
	}
	wait := len(out) > 0
	switch {
	case transition == TransitionTerminating && wait:
		in.state = "Terminating:Wait"
	case transition == TransitionTerminating:
		in.state = "Terminating:Proceed"
	case destination == PlaceWarmPool && wait:
		in.state = "Warmed:Pending:Wait"
	case destination == PlaceWarmPool:
		in.state = g.warmState
	case wait:
		in.state = "Pending:Wait"
	default:
		in.state = stateInService
	}
	return out
}

// AddInstance puts an InService instance into a group.
func (s *Server) AddInstance(groupName, instanceID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.groups[groupName]
	if !ok {
		return fmt.Errorf("asgfake: no group %q", groupName)
	}
	if _, ok := s.instances[instanceID]; ok {
		return fmt.Errorf("asgfake: instance %s already exists", instanceID)
	}
	s.instances[instanceID] = &instance{id: instanceID, group: groupName, state: "InService"}
	g.instances = append(g.instances, instanceID)
	return nil
}

// PutHook creates or replaces a lifecycle hook, with the API's defaults.
func (s *Server) PutHook(h Hook) error {
	s.mu.Lock()
	err := s.putHook(h)
	pending := s.takePending()
	s.mu.Unlock()
	s.send(pending)
	return err
}

func (s *Server) putHook(h Hook) error {
	g, ok := s.groups[h.Group]
	if !ok {
		return fmt.Errorf("AutoScalingGroup name not found - no such group: %s", h.Group)
	}
	if h.Name == "" {
		return fmt.Errorf("LifecycleHookName is required")
	}
	if h.Transition == "" {
		h.Transition = TransitionTerminating
	}
	if h.Transition != TransitionTerminating && h.Transition != TransitionLaunching {
		return fmt.Errorf("Invalid Lifecycle Transition: %s", h.Transition)
	}
	if h.HeartbeatTimeout == 0 {
		h.HeartbeatTimeout = time.Hour
	}
	if h.HeartbeatTimeout < 30*time.Second || h.HeartbeatTimeout > 7200*time.Second {
		return fmt.Errorf("HeartbeatTimeout must be between 30 and 7200 seconds, got %d", int(h.HeartbeatTimeout/time.Second))
	}
	if h.DefaultResult == "" {
		h.DefaultResult = ResultAbandon
	}
	if h.DefaultResult != ResultContinue && h.DefaultResult != ResultAbandon {
		return fmt.Errorf("Invalid DefaultResult: %s", h.DefaultResult)
	}
	g.hooks[h.Name] = &h
	if h.NotificationTargetARN != "" {
		s.pending = append(s.pending, mustJSON(map[string]string{
			"AccountId": "123456789012", "RequestId": s.requestID(), "Service": "AWS Auto Scaling",
			"AutoScalingGroupName": g.name, "Event": "autoscaling:TEST_NOTIFICATION",
			"AutoScalingGroupARN": "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0:autoScalingGroupName/" + g.name,
			"Time":                s.now().UTC().Format(time.RFC3339Nano),
		}))
	}
	return nil
}

// Terminate starts the termination of an instance as a scale-in would: with
// terminating hooks it enters Terminating:Wait and gets one action per hook
// (returned); without, it goes straight to Terminating:Proceed.
func (s *Server) Terminate(instanceID string) ([]Action, error) {
	s.mu.Lock()
	acts, err := s.terminate(instanceID)
	pending := s.takePending()
	s.mu.Unlock()
	s.send(pending)
	return acts, err
}

func (s *Server) terminate(instanceID string) ([]Action, error) {
	s.expire()
	in, ok := s.instances[instanceID]
	if !ok {
		return nil, fmt.Errorf("Instance Id not found - No managed instance found for instance ID: %s", instanceID)
	}
	origin := PlaceGroup
	switch in.state {
	case stateInService:
	case WarmedStopped, WarmedRunning, WarmedHibernated:
		origin = PlaceWarmPool
	default:
		return nil, fmt.Errorf("instance %s is %s, not InService", instanceID, in.state)
	}
	acts := s.startActions(s.groups[in.group], in, TransitionTerminating, origin, PlaceEC2)
	if origin == PlaceWarmPool {
		in.state = strings.Replace(in.state, "Terminating", "Warmed:Terminating", 1)
	}
	return acts, nil
}

// Actions returns a snapshot of every action, after applying expiry.
func (s *Server) Actions() []Action {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	out := make([]Action, len(s.actions))
	for i, a := range s.actions {
		out[i] = *a
	}
	return out
}

// Action returns the latest action of an instance.
func (s *Server) Action(instanceID string) (Action, bool) {
	acts := s.Actions()
	for i := len(acts) - 1; i >= 0; i-- {
		if acts[i].InstanceID == instanceID {
			return acts[i], true
		}
	}
	return Action{}, false
}

// InstanceState returns an instance's lifecycle state.
func (s *Server) InstanceState(instanceID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	if in, ok := s.instances[instanceID]; ok {
		return in.state
	}
	return ""
}

// Calls returns every call received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Count returns the number of calls of op (any op when "") whose result is
// result (any when "").
func (s *Server) Count(op, result string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.calls {
		if (op == "" || c.Op == op) && (result == "" || c.Result == result) {
			n++
		}
	}
	return n
}

// InjectFault adds a fault; faults are tried in the order added.
func (s *Server) InjectFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{Fault: f})
}

// ClearFaults removes every fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// expire ends the actions whose heartbeat or global timeout has passed,
// applying the hook's DefaultResult at the moment it expired.
func (s *Server) expire() {
	now := s.now()
	for _, a := range s.actions {
		if a.Ended || now.Before(a.Deadline) {
			continue
		}
		reason := EndHeartbeatTimeout
		if !a.Deadline.Before(a.GlobalDeadline) {
			reason = EndGlobalTimeout
		}
		result := ResultAbandon
		if g := s.groups[a.Group]; g != nil {
			if h := g.hooks[a.Hook]; h != nil {
				result = h.DefaultResult
			}
		}
		s.end(a, a.Deadline, reason, result)
	}
}

func (s *Server) end(a *Action, at time.Time, reason, result string) {
	a.Ended, a.EndedAt, a.EndReason, a.Result = true, at, reason, result
	in := s.instances[a.InstanceID]
	if in == nil {
		return
	}
	if a.Transition == TransitionLaunching && result == ResultAbandon {
		in.state = "Terminating:Proceed" // an abandoned launch is terminated at once
		return
	}
	for _, b := range s.actions {
		if b.InstanceID == a.InstanceID && !b.Ended {
			return // another hook still holds the instance
		}
	}
	switch in.state {
	case "Terminating:Wait":
		in.state = "Terminating:Proceed"
	case "Warmed:Terminating:Wait":
		in.state = "Warmed:Terminating:Proceed"
	case "Pending:Wait":
		in.state = stateInService
	case "Warmed:Pending:Wait":
		in.state = s.groups[in.group].warmState
	case WarmedStopped, WarmedRunning, WarmedHibernated:
		if a.Transition == TransitionLaunching && a.Destination == PlaceGroup {
			in.state = stateInService // left the warm pool
		}
	}
}

// apiError is an error answer.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func validation(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: "ValidationError", message: fmt.Sprintf(format, args...)}
}

// ServeHTTP answers one Query protocol request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || r.Method != http.MethodPost {
		s.mu.Lock()
		reqID := s.requestID()
		s.mu.Unlock()
		writeError(w, reqID, &apiError{status: http.StatusBadRequest, code: "MalformedQueryString", message: "expected a POST form body"})
		return
	}
	op := form.Get("Action")

	s.mu.Lock()
	s.expire()
	reqID := s.requestID()
	call := Call{At: s.now(), Op: op, Params: form}
	var result any
	var aerr *apiError
	f := s.pickFault(op)
	switch {
	case form.Get("Version") != APIVersion:
		aerr = &apiError{status: http.StatusBadRequest, code: "InvalidParameterValue", message: "unsupported Version " + form.Get("Version")}
	case f != nil && !f.AfterApply:
		aerr = f.apiError()
		call.Injected = true
	default:
		result, aerr = s.dispatch(op, form)
		call.Applied = aerr == nil
		if aerr == nil && f != nil {
			aerr = f.apiError()
			call.Injected = true
		}
	}
	call.Status, call.Result = http.StatusOK, "ok"
	if aerr != nil {
		call.Status, call.Result, call.Message = aerr.status, aerr.code, aerr.message
	}
	s.calls = append(s.calls, call)
	pending := s.takePending()
	s.mu.Unlock()
	s.send(pending)

	if aerr != nil {
		writeError(w, reqID, aerr)
		return
	}
	writeResult(w, op, reqID, result)
}

func (s *Server) pickFault(op string) *Fault {
	for _, f := range s.faults {
		if f.Op != "" && f.Op != op {
			continue
		}
		if f.Count > 0 && f.injected >= f.Count {
			continue
		}
		if f.Probability > 0 && s.rng.Float64() >= f.Probability {
			continue
		}
		f.injected++
		return &f.Fault
	}
	return nil
}

func (f *Fault) apiError() *apiError {
	switch f.Code {
	case "InternalFailure":
		return &apiError{status: http.StatusInternalServerError, code: f.Code, message: "injected internal failure"}
	case "ServiceUnavailable":
		return &apiError{status: http.StatusServiceUnavailable, code: f.Code, message: "injected unavailability"}
	case "Throttling", "":
		return &apiError{status: http.StatusBadRequest, code: "Throttling", message: "Rate exceeded"}
	default:
		return &apiError{status: http.StatusBadRequest, code: f.Code, message: "injected " + f.Code}
	}
}

func (s *Server) dispatch(op string, form url.Values) (any, *apiError) {
	switch op {
	case "RecordLifecycleActionHeartbeat":
		return s.heartbeat(form)
	case "CompleteLifecycleAction":
		return s.complete(form)
	case "DescribeAutoScalingInstances":
		return s.describeInstances(form)
	case "DescribeLifecycleHooks":
		return s.describeHooks(form)
	case "PutLifecycleHook":
		return s.putLifecycleHook(form)
	case "TerminateInstanceInAutoScalingGroup":
		return s.terminateInstance(form)
	default:
		return nil, &apiError{status: http.StatusBadRequest, code: "InvalidAction", message: fmt.Sprintf("Could not find operation %s for version %s", op, APIVersion)}
	}
}

// findAction applies the lookup rules shared by heartbeat and completion.
func (s *Server) findAction(form url.Values) (*Action, *apiError) {
	gname, hname := form.Get("AutoScalingGroupName"), form.Get("LifecycleHookName")
	token, iid := form.Get("LifecycleActionToken"), form.Get("InstanceId")
	if gname == "" || hname == "" {
		return nil, validation("AutoScalingGroupName and LifecycleHookName are required")
	}
	g, ok := s.groups[gname]
	if !ok {
		return nil, validation("AutoScalingGroup name not found - AutoScalingGroup %s not found", gname)
	}
	if _, ok := g.hooks[hname]; !ok {
		return nil, validation("No Lifecycle Hook found with name %s for group %s", hname, gname)
	}
	if token == "" && iid == "" {
		return nil, validation("Either LifecycleActionToken or InstanceId must be specified")
	}
	now := s.now()
	for i := len(s.actions) - 1; i >= 0; i-- {
		a := s.actions[i]
		if a.Group != gname || a.Hook != hname || a.Ended || now.Before(a.Started.Add(s.visibleAfter)) {
			continue
		}
		if token != "" && a.Token == token && (iid == "" || iid == a.InstanceID) {
			return a, nil
		}
		if token == "" && a.InstanceID == iid {
			return a, nil
		}
	}
	if token != "" {
		return nil, validation("No active Lifecycle Action found with token %s", token)
	}
	return nil, validation("No active Lifecycle Action found with instance ID %s", iid)
}

func (s *Server) heartbeat(form url.Values) (any, *apiError) {
	a, err := s.findAction(form)
	if err != nil {
		return nil, err
	}
	h := s.groups[a.Group].hooks[a.Hook]
	now := s.now()
	a.LastHeartbeat = now
	a.Heartbeats++
	a.Deadline = minTime(now.Add(h.HeartbeatTimeout), a.GlobalDeadline)
	return nil, nil
}

func (s *Server) complete(form url.Values) (any, *apiError) {
	result := form.Get("LifecycleActionResult")
	if result != ResultContinue && result != ResultAbandon {
		return nil, validation("Invalid LifecycleActionResult: %q (valid values are CONTINUE and ABANDON)", result)
	}
	a, err := s.findAction(form)
	if err != nil {
		return nil, err
	}
	a.Completions++
	s.end(a, s.now(), EndCompleted, result)
	return nil, nil
}

type instanceXML struct {
	InstanceID           string `xml:"InstanceId"`
	AutoScalingGroupName string `xml:"AutoScalingGroupName"`
	AvailabilityZone     string `xml:"AvailabilityZone"`
	LifecycleState       string `xml:"LifecycleState"`
	HealthStatus         string `xml:"HealthStatus"`
	ProtectedFromScaleIn bool   `xml:"ProtectedFromScaleIn"`
	InstanceType         string `xml:"InstanceType"`
}

type describeInstancesResult struct {
	XMLName   xml.Name      `xml:"DescribeAutoScalingInstancesResult"`
	Instances []instanceXML `xml:"AutoScalingInstances>member"`
}

func (s *Server) describeInstances(form url.Values) (any, *apiError) {
	ids := members(form, "InstanceIds")
	if len(ids) > 50 {
		return nil, validation("The maximum number of instance IDs is 50")
	}
	if len(ids) == 0 {
		for id := range s.instances {
			ids = append(ids, id)
		}
		slices.Sort(ids)
	}
	res := describeInstancesResult{Instances: []instanceXML{}}
	for _, id := range ids {
		in, ok := s.instances[id]
		if !ok {
			continue // the real service omits unknown instances
		}
		res.Instances = append(res.Instances, instanceXML{
			InstanceID: id, AutoScalingGroupName: in.group, AvailabilityZone: s.groups[in.group].az,
			LifecycleState: in.state, HealthStatus: "HEALTHY", InstanceType: "t3.micro",
		})
	}
	return res, nil
}

type hookXML struct {
	LifecycleHookName     string `xml:"LifecycleHookName"`
	AutoScalingGroupName  string `xml:"AutoScalingGroupName"`
	LifecycleTransition   string `xml:"LifecycleTransition"`
	HeartbeatTimeout      int32  `xml:"HeartbeatTimeout"`
	GlobalTimeout         int32  `xml:"GlobalTimeout"`
	DefaultResult         string `xml:"DefaultResult"`
	NotificationTargetARN string `xml:"NotificationTargetARN,omitempty"`
	NotificationMetadata  string `xml:"NotificationMetadata,omitempty"`
}

type describeHooksResult struct {
	XMLName xml.Name  `xml:"DescribeLifecycleHooksResult"`
	Hooks   []hookXML `xml:"LifecycleHooks>member"`
}

func (s *Server) describeHooks(form url.Values) (any, *apiError) {
	g, ok := s.groups[form.Get("AutoScalingGroupName")]
	if !ok {
		return nil, validation("AutoScalingGroup name not found - AutoScalingGroup %s not found", form.Get("AutoScalingGroupName"))
	}
	names := members(form, "LifecycleHookNames")
	if len(names) == 0 {
		for n := range g.hooks {
			names = append(names, n)
		}
		slices.Sort(names)
	}
	res := describeHooksResult{Hooks: []hookXML{}}
	for _, n := range names {
		h, ok := g.hooks[n]
		if !ok {
			continue
		}
		res.Hooks = append(res.Hooks, hookXML{
			LifecycleHookName: h.Name, AutoScalingGroupName: g.name, LifecycleTransition: h.Transition,
			HeartbeatTimeout: int32(h.HeartbeatTimeout / time.Second), GlobalTimeout: int32(h.GlobalTimeout() / time.Second),
			DefaultResult: h.DefaultResult, NotificationTargetARN: h.NotificationTargetARN, NotificationMetadata: h.NotificationMetadata,
		})
	}
	return res, nil
}

func (s *Server) putLifecycleHook(form url.Values) (any, *apiError) {
	h := Hook{
		Group: form.Get("AutoScalingGroupName"), Name: form.Get("LifecycleHookName"),
		Transition: form.Get("LifecycleTransition"), DefaultResult: form.Get("DefaultResult"),
		NotificationTargetARN: form.Get("NotificationTargetARN"), NotificationMetadata: form.Get("NotificationMetadata"),
	}
	if v := form.Get("HeartbeatTimeout"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, validation("HeartbeatTimeout %q is not an integer", v)
		}
		h.HeartbeatTimeout = time.Duration(n) * time.Second
	}
	if err := s.putHook(h); err != nil {
		return nil, validation("%s", err.Error())
	}
	return nil, nil
}

type activityXML struct {
	ActivityID           string `xml:"ActivityId"`
	AutoScalingGroupName string `xml:"AutoScalingGroupName"`
	Cause                string `xml:"Cause"`
	Description          string `xml:"Description"`
	StartTime            string `xml:"StartTime"`
	StatusCode           string `xml:"StatusCode"`
	Progress             int    `xml:"Progress"`
}

type terminateResult struct {
	XMLName  xml.Name    `xml:"TerminateInstanceInAutoScalingGroupResult"`
	Activity activityXML `xml:"Activity"`
}

func (s *Server) terminateInstance(form url.Values) (any, *apiError) {
	iid := form.Get("InstanceId")
	if _, err := s.terminate(iid); err != nil {
		return nil, validation("%s", err.Error())
	}
	return terminateResult{Activity: activityXML{
		ActivityID: s.uuid(), AutoScalingGroupName: s.instances[iid].group,
		Cause:       "At " + s.now().UTC().Format(time.RFC3339) + " instance " + iid + " was taken out of service in response to a user request.",
		Description: "Terminating EC2 instance: " + iid, StartTime: s.now().UTC().Format(time.RFC3339Nano),
		StatusCode: "InProgress",
	}}, nil
}

// members returns the list parameter Name.member.N in order.
func members(form url.Values, name string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := form[name+".member."+strconv.Itoa(i)]
		if !ok || len(v) == 0 {
			return out
		}
		out = append(out, v[0])
	}
}

func writeResult(w http.ResponseWriter, op, reqID string, result any) {
	var inner []byte
	if result != nil {
		var err error
		if inner, err = xml.Marshal(result); err != nil {
			writeError(w, reqID, &apiError{status: http.StatusInternalServerError, code: "InternalFailure", message: err.Error()})
			return
		}
	} else {
		inner = []byte("<" + op + "Result/>")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `<%sResponse xmlns="%s">%s<ResponseMetadata><RequestId>%s</RequestId></ResponseMetadata></%sResponse>`,
		op, Namespace, inner, reqID, op)
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-Requestid", reqID)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b.Bytes())
}

func writeError(w http.ResponseWriter, reqID string, e *apiError) {
	kind := "Sender"
	if e.status >= 500 {
		kind = "Receiver"
	}
	var msg bytes.Buffer
	_ = xml.EscapeText(&msg, []byte(e.message))
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-Requestid", reqID)
	w.WriteHeader(e.status)
	fmt.Fprintf(w, `<ErrorResponse xmlns="%s"><Error><Type>%s</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>%s</RequestId></ErrorResponse>`,
		Namespace, kind, e.code, msg.String(), reqID)
}

func (s *Server) requestID() string {
	s.reqs++
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", s.reqs, s.rng.Uint64()&0xffffffffffff)
}

func (s *Server) uuid() string {
	a, b := s.rng.Uint64(), s.rng.Uint64()
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", a>>32, a>>16&0xffff, a&0xfff, b>>48&0xfff, b&0xffffffffffff)
}

func (s *Server) takePending() []string {
	p := s.pending
	s.pending = nil
	if s.notify == nil {
		return nil
	}
	return p
}

func (s *Server) send(bodies []string) {
	for _, b := range bodies {
		s.notify(b)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v) // a map of strings always marshals
	return string(b)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
