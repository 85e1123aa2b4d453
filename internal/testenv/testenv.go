// Package testenv hands tests the services scripts/test.sh starts: a
// redis-server, a Redis Cluster and AWS's ec2-metadata-mock. Without one a
// test skips when run locally and fails under CI=true, so CI can never pass
// by skipping.
package testenv

import (
	"os"
	"strings"
	"testing"
)

// Require returns the environment variable name, or skips tb locally and
// fails it under CI=true when it is unset; hint says how to get it.
func Require(tb testing.TB, name, hint string) string {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s is not set under CI=true: %s", name, hint)
		}
		tb.Skipf("%s not set: %s", name, hint)
	}
	return v
}

// RedisAddr is host:port of the test redis-server.
func RedisAddr(tb testing.TB) string {
	tb.Helper()
	return Require(tb, "AUTODIAG_TEST_REDIS_ADDR", "scripts/test.sh starts a redis-server")
}

// RedisClusterAddrs are the seeds of the test Redis Cluster.
func RedisClusterAddrs(tb testing.TB) []string {
	tb.Helper()
	return strings.Split(Require(tb, "AUTODIAG_TEST_REDIS_CLUSTER_ADDRS", "scripts/test.sh starts a 3-master cluster"), ",")
}

// EC2MetadataMock is the path of AWS's ec2-metadata-mock binary, once
// scripts/test.sh's background build of it has ended (WaitForBuilds).
func EC2MetadataMock(tb testing.TB) string {
	tb.Helper()
	path := Require(tb, "AUTODIAG_TEST_EC2_METADATA_MOCK", "scripts/test.sh installs ec2-metadata-mock v1.13.0")
	if err := WaitForBuilds(); err != nil {
		tb.Fatal(err)
	}
	return path
}
