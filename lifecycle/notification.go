package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Lifecycle transitions and events found in ASG notifications.
const (
	transitionTerminating = "autoscaling:EC2_INSTANCE_TERMINATING"
	transitionLaunching   = "autoscaling:EC2_INSTANCE_LAUNCHING"
	eventTestNotification = "autoscaling:TEST_NOTIFICATION"
	detailTypeTerminate   = "EC2 Instance-terminate Lifecycle Action"
	detailTypeLaunch      = "EC2 Instance-launch Lifecycle Action"
)

// notification is an ASG lifecycle notification, whatever its envelope.
type notification struct {
	Test       bool // autoscaling:TEST_NOTIFICATION
	Transition string
	ASGName    string
	HookName   string
	Token      string
	InstanceID string
	Time       time.Time
	// Origin and Destination say where the instance moves (EC2,
	// AutoScalingGroup, WarmPool); empty in older notices.
	Origin      string
	Destination string
}

// asgMessage is the body Auto Scaling sends to SQS/SNS directly, and the
// "detail" of the EventBridge event.
type asgMessage struct {
	Event                string `json:"Event"`
	LifecycleTransition  string `json:"LifecycleTransition"`
	AutoScalingGroupName string `json:"AutoScalingGroupName"`
	LifecycleHookName    string `json:"LifecycleHookName"`
	LifecycleActionToken string `json:"LifecycleActionToken"`
	EC2InstanceID        string `json:"EC2InstanceId"`
	Time                 string `json:"Time"`
	Origin               string `json:"Origin"`
	Destination          string `json:"Destination"`
}

// envelope holds the fields that tell the shapes apart.
type envelope struct {
	asgMessage
	Type       string          `json:"Type"`    // SNS: "Notification"
	Message    *string         `json:"Message"` // SNS: the ASG JSON as a string
	DetailType string          `json:"detail-type"`
	Detail     json.RawMessage `json:"detail"`
	EventTime  string          `json:"time"` // EventBridge
}

// errNotLifecycle marks a well-formed message that is not a lifecycle
// notification at all.
var errNotLifecycle = errors.New("not an Auto Scaling lifecycle notification")

// parseNotification understands the direct ASG notification JSON, the same
// wrapped in an SNS envelope, and the EventBridge "EC2 Instance-terminate
// Lifecycle Action" event.
func parseNotification(body string) (notification, error) {
	return parse(body, 0)
}

func parse(body string, depth int) (notification, error) {
	var env envelope
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		return notification{}, fmt.Errorf("decode notification: %w", err)
	}
	switch {
	case env.Type == "Notification" && env.Message != nil:
		if depth > 0 {
			return notification{}, errors.New("nested SNS envelopes")
		}
		return parse(*env.Message, depth+1)
	case env.DetailType != "":
		var m asgMessage
		if err := json.Unmarshal(env.Detail, &m); err != nil {
			return notification{}, fmt.Errorf("decode EventBridge detail: %w", err)
		}
		if m.Time == "" {
			m.Time = env.EventTime
		}
		if m.LifecycleTransition == "" && env.DetailType == detailTypeTerminate {
			m.LifecycleTransition = transitionTerminating
		}
		if m.LifecycleTransition == "" && env.DetailType == detailTypeLaunch {
			m.LifecycleTransition = transitionLaunching
		}
		return fromASG(m)
	default:
		return fromASG(env.asgMessage)
	}
}

func fromASG(m asgMessage) (notification, error) {
	n := notification{
		Test:       m.Event == eventTestNotification,
		Transition: m.LifecycleTransition,
		ASGName:    m.AutoScalingGroupName,
		HookName:   m.LifecycleHookName,
		Token:      m.LifecycleActionToken,
		InstanceID: m.EC2InstanceID,
		Origin:     m.Origin, Destination: m.Destination,
	}
	if m.Time != "" {
		if t, err := time.Parse(time.RFC3339Nano, m.Time); err == nil {
			n.Time = t
		}
	}
	if n.Test {
		return n, nil
	}
	if n.Transition == "" {
		return n, errNotLifecycle
	}
	if n.InstanceID == "" || n.ASGName == "" || n.HookName == "" || n.Token == "" {
		return n, fmt.Errorf("lifecycle notification without EC2InstanceId, AutoScalingGroupName, LifecycleHookName or LifecycleActionToken")
	}
	return n, nil
}
