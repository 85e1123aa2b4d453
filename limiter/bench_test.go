package limiter

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Benchmarks compare one full-rule decision (daily, min_interval, window,
// rate and block in one EVALSHA) with go-redis/redis_rate's Allow (one GCRA)
// on the same Redis at 1, 8 and 64 goroutines. Each reports p50/p99 latency
// in µs and, from INFO commandstats, evalsha (and eval) calls per decision.
// scripts/bench runs them and prints the comparison.

var benchConcurrency = []int{1, 8, 64}

const benchKeys = 10000

func benchHosts(n int) []string {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("host-%06d.prod.example.com", i)
	}
	return hosts
}

// fullRule has every limit kind, with limits high enough that the
// benchmark's decisions are allowed (the most work: everything is written).
// Its window has defaultWindowLogMax runs per second: the largest kept as a log in
// the state key (each of the benchKeys keys sees far fewer runs per second).
func fullRule() Config { return fullRuleWindow(defaultWindowLogMax) }

// largeWindow is a window count kept in a sorted set.
const largeWindow = 1 << 20

func fullRuleWindow(count int) Config {
	return rules(Rule{Name: "full", Block: time.Minute, Limits: []Limit{
		{Daily: 1 << 30},
		{MinInterval: time.Millisecond},
		{Window: &Window{Count: count, Per: time.Second}},
		{Rate: &Rate{Count: 1 << 20, Per: time.Second, Burst: 2}},
	}})
}

// fullRuleRuns is fullRule with a concurrency limit (high enough that
// every decision takes a slot) and a shadow rule with a daily quota and a
// rate on the same key: the most a decision under one key writes.
func fullRuleRuns() Config {
	c := fullRule()
	c.Rules[0].Limits = append(c.Rules[0].Limits, Limit{Concurrency: Concurrency{Max: 1 << 20}})
	c.Rules = append(c.Rules, Rule{Name: "shadow", Shadow: true, Limits: []Limit{
		{Daily: 1 << 30}, {Rate: &Rate{Count: 1 << 20, Per: time.Second}},
	}})
	return c
}

// runConcurrent runs b.N calls of op on exactly g goroutines and reports
// latency percentiles.
func runConcurrent(b *testing.B, g int, op func(ctx context.Context, i int) error) {
	ctx := context.Background()
	lat := make([][]time.Duration, g)
	per := b.N/g + 1
	for i := range lat {
		lat[i] = make([]time.Duration, 0, per)
	}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	b.ResetTimer()
	for w := range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				start := time.Now()
				if err := op(ctx, i); err != nil {
					failed.Store(err)
					return
				}
				lat[w] = append(lat[w], time.Since(start))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)*50/100].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
}

// commandStats returns calls per command from INFO commandstats.
func commandStats(b *testing.B, c *redis.Client) map[string]int64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := sc.Text() // cmdstat_evalsha:calls=1,usec=...
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}

func reportCommands(b *testing.B, c *redis.Client, before map[string]int64) {
	after := commandStats(b, c)
	for _, cmd := range []string{"evalsha", "eval"} {
		b.ReportMetric(float64(after[cmd]-before[cmd])/float64(b.N), cmd+"/op")
	}
}

// benchClient is the client both sides use, with the options of the agent's
// (open.RedisClient: ContextTimeoutEnabled, so the limiter bounds a call
// with a context deadline instead of a goroutine of its own).
func benchClient(b *testing.B) *redis.Client {
	addr := requireEnv(b, "AUTODIAG_TEST_REDIS_ADDR")
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64, MinIdleConns: 8, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		b.Fatal(err)
	}
	return c
}

func BenchmarkAllowRedis(b *testing.B) {
	c := benchClient(b)
	benchAllowRedis(b, c, c)
}

func benchAllowRedis(b *testing.B, c *redis.Client, s redis.Scripter) {
	hosts := benchHosts(benchKeys)
	for _, g := range benchConcurrency {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			l, err := New(fullRule(), NewRedis(s, uniquePrefix(b)), Options{Timeout: 5 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := l.Allow(context.Background(), Request{Host: hosts[0], Diagnostic: "disk-usage"}); err != nil {
				b.Fatal(err) // loads the script
			}
			before := commandStats(b, c)
			b.ReportAllocs()
			runConcurrent(b, g, func(ctx context.Context, i int) error {
				d, err := l.Allow(ctx, Request{Host: hosts[i%benchKeys], Diagnostic: "disk-usage"})
				if err == nil && d.Degraded {
					err = fmt.Errorf("degraded decision: %+v", d)
				}
				return err
			})
			reportCommands(b, c, before)
		})
	}
}

func BenchmarkRedisRate(b *testing.B) {
	c := benchClient(b)
	benchRedisRate(b, c, c)
}

// rateClient is what redis_rate.NewLimiter needs.
type rateClient interface {
	Eval(ctx context.Context, script string, keys []string, args ...interface{}) *redis.Cmd
	EvalSha(ctx context.Context, sha1 string, keys []string, args ...interface{}) *redis.Cmd
	ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	EvalRO(ctx context.Context, script string, keys []string, args ...interface{}) *redis.Cmd
	EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...interface{}) *redis.Cmd
}

func benchRedisRate(b *testing.B, c *redis.Client, s rateClient) {
	hosts := benchHosts(benchKeys)
	for _, g := range benchConcurrency {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			rl := redis_rate.NewLimiter(s)
			limit := redis_rate.PerSecond(1 << 20)
			prefix := uniquePrefix(b)
			keys := make([]string, len(hosts))
			for i, h := range hosts {
				keys[i] = prefix + h
			}
			if _, err := rl.Allow(context.Background(), keys[0], limit); err != nil {
				b.Fatal(err)
			}
			before := commandStats(b, c)
			b.ReportAllocs()
			runConcurrent(b, g, func(ctx context.Context, i int) error {
				_, err := rl.Allow(ctx, keys[i%benchKeys], limit)
				return err
			})
			reportCommands(b, c, before)
		})
	}
}

// BenchmarkAllowMemory: the in-memory backend, full rule, 100k distinct keys.
func BenchmarkAllowMemory(b *testing.B) {
	const keys = 100000
	hosts := benchHosts(keys)
	l, err := New(fullRule(), NewMemory(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, h := range hosts { // every key exists: lookups, not inserts
		if _, err := l.Allow(ctx, Request{Host: h, Diagnostic: "disk-usage"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := l.Allow(ctx, Request{Host: hosts[i%keys], Diagnostic: "disk-usage"}); err != nil {
			b.Fatal(err)
		}
	}
}

// compareRound is how many operations of one side run before the other
// side's turn in BenchmarkCompare.
const compareRound = 1024

// BenchmarkCompare interleaves full-rule limiter decisions and redis_rate
// Allow calls in rounds of compareRound operations, at the same concurrency
// on the same Redis, with the same client options (the agent's) and the
// same key distribution (operation i uses host i%benchKeys on both sides),
// after a warm-up round of each, so that load drift on a shared machine
// hits both alike. b.N counts the operations of each side. It reports wall
// time per operation of each side, their ratio as decisions/s (limiter ÷
// redis_rate: above 1 the limiter is faster), p50/p99 latency of each, and
// evalsha+eval calls per operation of both sides together (1 = one per
// operation).
//
// Modes: plain: both on the *redis.Client, one command per call;
// autopipeline: both through client.AutoPipeline() (the limiter then runs
// each call on a goroutine of its own); batched: the limiter on the
// client, redis_rate through AutoPipeline(); zset: plain, with a window too
// large for the state key's log (a sorted set); runlimits: plain, the full
// rule plus a concurrency slot taken per decision and a shadow rule on the
// same key (fullRuleRuns), still one EVALSHA.
func BenchmarkCompare(b *testing.B) {
	c := benchClient(b)
	ap, err := c.AutoPipeline()
	if err != nil {
		b.Fatal(err)
	}
	hosts := benchHosts(benchKeys)
	for _, mode := range []struct {
		name   string
		lim    redis.Scripter
		rate   rateClient
		window int
		runs   bool // the full rule with a concurrency slot and a shadow rule on the same key
	}{
		{"plain", c, c, defaultWindowLogMax, false},
		{"autopipeline", ap, ap, defaultWindowLogMax, false},
		{"batched", c, ap, defaultWindowLogMax, false},
		{"zset", c, c, largeWindow, false},
		{"runlimits", c, c, defaultWindowLogMax, true},
	} {
		for _, g := range benchConcurrency {
			b.Run(fmt.Sprintf("%s/goroutines=%d", mode.name, g), func(b *testing.B) {
				prefix := uniquePrefix(b)
				cfg := fullRuleWindow(mode.window)
				if mode.runs {
					cfg = fullRuleRuns()
				}
				l, err := New(cfg, NewRedis(mode.lim, prefix), Options{Timeout: 5 * time.Second})
				if err != nil {
					b.Fatal(err)
				}
				rl := redis_rate.NewLimiter(mode.rate)
				limit := redis_rate.PerSecond(1 << 20)
				keys := make([]string, len(hosts))
				for i, h := range hosts {
					keys[i] = prefix + "rate:" + h
				}
				limOp := func(ctx context.Context, i int) error {
					r := Request{Host: hosts[i%benchKeys], Diagnostic: "disk-usage"}
					if mode.runs {
						r.TaskID, r.Lease = strconv.Itoa(i), time.Minute
					}
					d, err := l.Allow(ctx, r)
					if err == nil && d.Degraded {
						err = fmt.Errorf("degraded decision: %+v", d)
					}
					return err
				}
				rateOp := func(ctx context.Context, i int) error {
					_, err := rl.Allow(ctx, keys[i%benchKeys], limit)
					return err
				}
				var limT, rateT time.Duration
				var limLat, rateLat []time.Duration
				// Warm-up (loads the scripts, fills the pools).
				runRound(b, g, benchKeys/2, compareRound, limOp, &limLat)
				runRound(b, g, benchKeys/2, compareRound, rateOp, &rateLat)
				limLat, rateLat = limLat[:0], rateLat[:0]
				before := commandStats(b, c)
				b.ResetTimer()
				for done := 0; done < b.N; {
					n := min(compareRound, b.N-done)
					limT += runRound(b, g, done, n, limOp, &limLat)
					rateT += runRound(b, g, done, n, rateOp, &rateLat)
					done += n
				}
				b.StopTimer()
				after := commandStats(b, c)
				b.ReportMetric(float64(limT.Nanoseconds())/float64(b.N), "lim-ns/op")
				b.ReportMetric(float64(rateT.Nanoseconds())/float64(b.N), "rate-ns/op")
				b.ReportMetric(float64(rateT)/float64(limT), "ratio")
				b.ReportMetric(percentile(limLat, 50), "lim-p50-µs")
				b.ReportMetric(percentile(limLat, 99), "lim-p99-µs")
				b.ReportMetric(percentile(rateLat, 50), "rate-p50-µs")
				b.ReportMetric(percentile(rateLat, 99), "rate-p99-µs")
				calls := after["evalsha"] - before["evalsha"] + after["eval"] - before["eval"]
				b.ReportMetric(float64(calls)/float64(2*b.N), "evals/op")
			})
		}
	}
}

// runRound runs operations first..first+n-1 of op on g goroutines and
// returns the wall time; latencies are appended to lat.
func runRound(b *testing.B, g, first, n int, op func(context.Context, int) error, lat *[]time.Duration) time.Duration {
	ctx := context.Background()
	g = min(g, n)
	per := make([][]time.Duration, g)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := range g {
		wg.Go(func() {
			mine := make([]time.Duration, 0, n/g+1)
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					break
				}
				t := time.Now()
				if err := op(ctx, first+i); err != nil {
					failed.Store(err)
					break
				}
				mine = append(mine, time.Since(t))
			}
			per[w] = mine
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	for _, p := range per {
		*lat = append(*lat, p...)
	}
	return elapsed
}

func percentile(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)*p/100].Microseconds())
}
