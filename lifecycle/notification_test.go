package lifecycle

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

const (
	directNote = `{"Origin":"AutoScalingGroup","Destination":"EC2","Service":"AWS Auto Scaling","Time":"2026-08-11T10:00:00.123Z","RequestId":"r-1","LifecycleActionToken":"tok-1","AccountId":"123456789012","AutoScalingGroupName":"web","LifecycleHookName":"drain","EC2InstanceId":"i-1","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","NotificationMetadata":"x"}`
	testNote   = `{"AccountId":"123456789012","RequestId":"r-2","AutoScalingGroupARN":"arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0:autoScalingGroupName/web","AutoScalingGroupName":"web","Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","Time":"2026-08-11T09:00:00Z"}`
	bridgeNote = `{"version":"0","id":"e-1","detail-type":"EC2 Instance-terminate Lifecycle Action","source":"aws.autoscaling","account":"123456789012","time":"2026-08-11T10:00:00Z","region":"us-east-1","resources":["arn:aws:autoscaling:..."],"detail":{"LifecycleActionToken":"tok-1","AutoScalingGroupName":"web","LifecycleHookName":"drain","EC2InstanceId":"i-1","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","NotificationMetadata":"x","Origin":"AutoScalingGroup","Destination":"EC2"}}`
	launchNote = `{"version":"0","id":"e-2","detail-type":"EC2 Instance-launch Lifecycle Action","source":"aws.autoscaling","time":"2026-08-11T10:00:00Z","detail":{"LifecycleActionToken":"tok-2","AutoScalingGroupName":"web","LifecycleHookName":"warm","EC2InstanceId":"i-9","LifecycleTransition":"autoscaling:EC2_INSTANCE_LAUNCHING"}}`
)

// warmLaunchNote is an EventBridge launch event without LifecycleTransition
// (the detail-type says it), into a warm pool.
const warmLaunchNote = `{"version":"0","id":"e-3","detail-type":"EC2 Instance-launch Lifecycle Action","source":"aws.autoscaling","time":"2026-08-11T10:00:00Z","detail":{"LifecycleActionToken":"tok-3","AutoScalingGroupName":"web","LifecycleHookName":"ready","EC2InstanceId":"i-9","Origin":"EC2","Destination":"WarmPool"}}`

func snsWrap(body string) string {
	b, _ := json.Marshal(map[string]string{"Type": "Notification", "MessageId": "m-1", "TopicArn": "arn:aws:sns:us-east-1:123456789012:asg", "Message": body})
	return string(b)
}

func TestParseNotification(t *testing.T) {
	want := notification{Transition: transitionTerminating, ASGName: "web", HookName: "drain", Token: "tok-1", InstanceID: "i-1",
		Origin: "AutoScalingGroup", Destination: "EC2"}
	tests := []struct {
		name     string
		body     string
		want     notification
		wantTime time.Time
		wantErr  bool
	}{
		{"direct", directNote, want, time.Date(2026, 8, 11, 10, 0, 0, 123e6, time.UTC), false},
		{"SNS wrapped", snsWrap(directNote), want, time.Date(2026, 8, 11, 10, 0, 0, 123e6, time.UTC), false},
		{"EventBridge", bridgeNote, want, time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC), false},
		{"test notification", testNote, notification{Test: true, ASGName: "web"}, time.Date(2026, 8, 11, 9, 0, 0, 0, time.UTC), false},
		{"SNS wrapped test notification", snsWrap(testNote), notification{Test: true, ASGName: "web"}, time.Date(2026, 8, 11, 9, 0, 0, 0, time.UTC), false},
		{"EventBridge launch into the warm pool", warmLaunchNote, notification{Transition: transitionLaunching, ASGName: "web", HookName: "ready",
			Token: "tok-3", InstanceID: "i-9", Origin: "EC2", Destination: "WarmPool"}, time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC), false},
		{"EventBridge launch", launchNote, notification{Transition: "autoscaling:EC2_INSTANCE_LAUNCHING", ASGName: "web", HookName: "warm", Token: "tok-2", InstanceID: "i-9"},
			time.Date(2026, 8, 11, 10, 0, 0, 0, time.UTC), false},
		{"not JSON", "hello", notification{}, time.Time{}, true},
		{"a task message", `{"id":"evt-1","host":"web-01"}`, notification{}, time.Time{}, true},
		{"missing token", `{"LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","EC2InstanceId":"i-1","AutoScalingGroupName":"web","LifecycleHookName":"drain"}`,
			notification{}, time.Time{}, true},
		{"SNS with broken inner JSON", `{"Type":"Notification","Message":"{"}`, notification{}, time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseNotification(tt.body)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseNotification err = %v; want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if !got.Time.Equal(tt.wantTime) {
				t.Errorf("time = %s; want %s", got.Time, tt.wantTime)
			}
			got.Time = time.Time{}
			if got != tt.want {
				t.Errorf("parseNotification = %+v; want %+v", got, tt.want)
			}
		})
	}
	if _, err := parseNotification(`{"id":"evt-1"}`); !errors.Is(err, errNotLifecycle) {
		t.Errorf("task message error = %v; want errNotLifecycle", err)
	}
}
