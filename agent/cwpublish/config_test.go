package cwpublish

import (
	"strings"
	"testing"
	"time"

	"github.com/autodiag/autodiag/agent/config"
)

// TestCloudWatchIntervalConfig: cloudwatch.interval is a minute when
// unset (zero) and may not exceed it, the period of the alarms that read the metrics.
func TestCloudWatchIntervalConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml    string
		want    time.Duration
		wantErr string
	}{
		{yaml: "cloudwatch: {enabled: true}\n", want: time.Minute},
		{yaml: "cloudwatch: {enabled: true, interval: 10s}\n", want: 10 * time.Second},
		{yaml: "cloudwatch: {enabled: true, interval: 2m}\n", wantErr: "cloudwatch.interval"},
		{yaml: "cloudwatch: {enabled: true, interval: -1s}\n", wantErr: "cloudwatch.interval"},
	} {
		cfg, err := config.Load([]byte(tc.yaml), nil)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want one naming %s", tc.yaml, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case (&Publisher{every: cfg.CloudWatch.Interval}).interval() != tc.want:
			t.Errorf("%q: interval %s, want %s", tc.yaml, cfg.CloudWatch.Interval, tc.want)
		}
	}
}
