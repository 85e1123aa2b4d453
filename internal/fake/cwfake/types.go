package cwfake

import "time"

// Datum is one accepted MetricDatum with the request it came in.
type Datum struct {
	Seq        int       // Call.Seq of the request that carried it
	Received   time.Time // when that request arrived, on the server's Clock
	Namespace  string
	MetricName string
	Dimensions []Dimension // in the order sent
	// Timestamp is the datum's Timestamp as sent (millisecond precision, UTC);
	// zero when omitted, in which case CloudWatch uses the receipt time
	// (see Time).
	Timestamp time.Time
	// Value is the single value. Exactly one of Value, StatisticValues and
	// Values is sent; Value is meaningful when the other two are nil.
	Value           float64
	StatisticValues *StatisticSet
	Values          []float64
	Counts          []float64
	Unit            string // "" when omitted (CloudWatch stores None)
	// StorageResolution is 1 (high resolution) or 60; 0 when omitted, which
	// CloudWatch treats as 60.
	StorageResolution int
}

// Dimension is a name/value pair of a datum.
type Dimension struct {
	Name, Value string
}

// StatisticSet is a datum's pre-aggregated statistics.
type StatisticSet struct {
	SampleCount, Sum, Minimum, Maximum float64
}

// Time is the time CloudWatch files the datum under: its Timestamp, or the
// receipt time when it has none.
func (d Datum) Time() time.Time {
	if d.Timestamp.IsZero() {
		return d.Received
	}
	return d.Timestamp
}

// Dimension returns the value of the named dimension.
func (d Datum) Dimension(name string) (string, bool) {
	for _, dim := range d.Dimensions {
		if dim.Name == name {
			return dim.Value, true
		}
	}
	return "", false
}

// Named returns the datums of data whose MetricName is name, in order.
func Named(data []Datum, name string) []Datum {
	var out []Datum
	for _, d := range data {
		if d.MetricName == name {
			out = append(out, d)
		}
	}
	return out
}

// Call is one HTTP request as the server saw it.
type Call struct {
	Seq  int
	Time time.Time // when the request arrived (server clock)
	Op   string    // operation name from the path, e.g. "PutMetricData"
	// InvocationID is the SDK's amz-sdk-invocation-id: the same for every
	// attempt of one SDK call, so retries are countable.
	InvocationID string
	Attempt      int    // from amz-sdk-request (1 = first attempt); 0 if absent
	Status       int    // HTTP status answered
	ErrorCode    string // Query error code answered (what the SDK's ErrorCode() returns); "" on success
	Fault        FaultKind
	Datums       int // datums accepted (0 unless Status is 200)
	// ContentEncoding is the request's Content-Encoding ("gzip" when the SDK
	// compressed the body).
	ContentEncoding string
}
