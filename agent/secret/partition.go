package secret

import (
	"regexp"
	"sync"
)

// partition is what an endpoint rule needs of an AWS partition: its name
// and DNS suffixes. The data is the SDK's partitions.json (every
// partition supports FIPS and dual-stack there);
// TestEndpointsMatchSDK holds the endpoints built from it to the SDK's
// resolvers.
type partition struct {
	name, dns, dualStack string
	regions              string // region-name pattern
}

var partitions = []partition{
	{"aws", "amazonaws.com", "api.aws", `^(us|eu|ap|sa|ca|me|af|il|mx)\-\w+\-\d+$`},
	{"aws-cn", "amazonaws.com.cn", "api.amazonwebservices.com.cn", `^cn\-\w+\-\d+$`},
	{"aws-eusc", "amazonaws.eu", "api.amazonwebservices.eu", `^eusc\-(de)\-\w+\-\d+$`},
	{"aws-iso", "c2s.ic.gov", "api.aws.ic.gov", `^us\-iso\-\w+\-\d+$`},
	{"aws-iso-b", "sc2s.sgov.gov", "api.aws.scloud", `^us\-isob\-\w+\-\d+$`},
	{"aws-iso-e", "cloud.adc-e.uk", "api.cloud-aws.adc-e.uk", `^eu\-isoe\-\w+\-\d+$`},
	{"aws-iso-f", "csp.hci.ic.gov", "api.aws.hci.ic.gov", `^us\-isof\-\w+\-\d+$`},
	{"aws-us-gov", "amazonaws.com", "api.aws", `^us\-gov\-\w+\-\d+$`},
}

var partitionPatterns = sync.OnceValue(func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(partitions))
	for i, p := range partitions {
		out[i] = regexp.MustCompile(p.regions)
	}
	return out
})

// partitionOf is the partition of region: the one whose global
// pseudo-region it is, else the one whose pattern it matches, else aws.
func partitionOf(region string) partition {
	for _, p := range partitions {
		if region == p.name+"-global" {
			return p
		}
	}
	for i, re := range partitionPatterns() {
		if re.MatchString(region) {
			return partitions[i]
		}
	}
	return partitions[0]
}
