package cwfake

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/smithy-go/encoding/cbor"
)

// CloudWatch's documented PutMetricData limits.
const (
	MaxDatums      = 1000 // datums per request
	MaxDimensions  = 30   // dimensions per datum
	MaxValues      = 150  // entries of Values (and Counts) per datum
	maxNameLen     = 255  // namespace, metric name, dimension name
	maxDimValueLen = 1024 // dimension value
	maxPast        = 14 * 24 * time.Hour
	maxFuture      = 2 * time.Hour
	reservedPrefix = "AWS/"
)

// Magnitude bounds of a value CloudWatch accepts: 2^-360 and 2^360.
var (
	minMagnitude = math.Ldexp(1, -360)
	maxMagnitude = math.Ldexp(1, 360)
)

// standardUnits is the model's StandardUnit enum.
var standardUnits = cwtypes.StandardUnit("").Values()

// datumIn is a decoded datum with what the wire said about its value.
type datumIn struct {
	Datum
	hasValue bool // Value was sent
}

type putMetricDataInput struct {
	namespace    *string
	hasEntity    bool
	hasData      bool
	data         []datumIn
	missing      string // first required member absent, as a Query path
	missingFound bool
}

// decodeError is a body that is not the CBOR shape of PutMetricDataInput.
func decodeError(path string, v cbor.Value, want string) *apiError {
	return errSerialization("%s: expected %s, got %T", path, want, v)
}

func isNull(v cbor.Value) bool {
	switch v.(type) {
	case *cbor.Nil, *cbor.Undefined, nil:
		return true
	}
	return false
}

// decodePutMetricData turns the CBOR body into the input, checking types
// only; an unknown member is ignored, as RPC v2 servers do.
func decodePutMetricData(body []byte) (*putMetricDataInput, *apiError) {
	in := &putMetricDataInput{}
	if len(body) == 0 {
		return in, nil
	}
	v, err := cbor.Decode(body)
	if err != nil {
		return nil, errSerialization("decoding CBOR body: %v", err)
	}
	top, ok := v.(cbor.Map)
	if !ok {
		return nil, decodeError("PutMetricDataInput", v, "a map")
	}
	if nv, ok := top["Namespace"]; ok && !isNull(nv) {
		s, ok := nv.(cbor.String)
		if !ok {
			return nil, decodeError("Namespace", nv, "a string")
		}
		in.namespace = (*string)(&s)
	}
	if ev, ok := top["EntityMetricData"]; ok && !isNull(ev) {
		in.hasEntity = true
	}
	mv, ok := top["MetricData"]
	if !ok || isNull(mv) {
		return in, nil
	}
	list, ok := mv.(cbor.List)
	if !ok {
		return nil, decodeError("MetricData", mv, "a list")
	}
	in.hasData = true
	for i, item := range list {
		path := fmt.Sprintf("MetricData.member.%d", i+1)
		m, ok := item.(cbor.Map)
		if !ok {
			return nil, decodeError(path, item, "a map")
		}
		d, aerr := decodeDatum(path, m, in)
		if aerr != nil {
			return nil, aerr
		}
		in.data = append(in.data, d)
	}
	return in, nil
}

// decodeDatum reads one MetricDatum. A required member that is absent is
// noted in in.missing (the first one, in request order) for validate to
// report after the request-level checks.
func decodeDatum(path string, m cbor.Map, in *putMetricDataInput) (datumIn, *apiError) {
	var di datumIn
	d := &di.Datum
	missing := func(p string) {
		if !in.missingFound {
			in.missing, in.missingFound = p, true
		}
	}
	str := func(key string) (string, bool, *apiError) {
		v, ok := m[key]
		if !ok || isNull(v) {
			return "", false, nil
		}
		s, ok := v.(cbor.String)
		if !ok {
			return "", false, decodeError(path+"."+key, v, "a string")
		}
		return string(s), true, nil
	}
	name, ok, aerr := str("MetricName")
	if aerr != nil {
		return di, aerr
	}
	if !ok {
		missing(path + ".MetricName")
	}
	d.MetricName = name
	if unit, ok, aerr := str("Unit"); aerr != nil {
		return di, aerr
	} else if ok {
		d.Unit = unit
	}
	if v, ok := m["Dimensions"]; ok && !isNull(v) {
		list, ok := v.(cbor.List)
		if !ok {
			return di, decodeError(path+".Dimensions", v, "a list")
		}
		d.Dimensions = make([]Dimension, 0, len(list))
		for j, item := range list {
			dpath := fmt.Sprintf("%s.%s.member.%d", path, "Dimensions", j+1)
			dm, ok := item.(cbor.Map)
			if !ok {
				return di, decodeError(dpath, item, "a map")
			}
			var dim Dimension
			for _, f := range []struct {
				key string
				dst *string
			}{{"Name", &dim.Name}, {"Value", &dim.Value}} {
				fv, ok := dm[f.key]
				if !ok || isNull(fv) {
					missing(dpath + "." + f.key)
					continue
				}
				s, ok := fv.(cbor.String)
				if !ok {
					return di, decodeError(dpath+"."+f.key, fv, "a string")
				}
				*f.dst = string(s)
			}
			d.Dimensions = append(d.Dimensions, dim)
		}
	}
	if v, ok := m["Timestamp"]; ok && !isNull(v) {
		t, err := cbor.AsTime(v)
		if err != nil {
			return di, errSerialization("%s.Timestamp: %v", path, err)
		}
		d.Timestamp = t.UTC()
	}
	if v, ok := m["Value"]; ok && !isNull(v) {
		f, err := cbor.AsFloat64(v)
		if err != nil {
			return di, errSerialization("%s.Value: %v", path, err)
		}
		d.Value, di.hasValue = f, true
	}
	if v, ok := m["StatisticValues"]; ok && !isNull(v) {
		sm, ok := v.(cbor.Map)
		if !ok {
			return di, decodeError(path+".StatisticValues", v, "a map")
		}
		var ss StatisticSet
		for _, f := range []struct {
			key string
			dst *float64
		}{{"SampleCount", &ss.SampleCount}, {"Sum", &ss.Sum}, {"Minimum", &ss.Minimum}, {"Maximum", &ss.Maximum}} {
			fv, ok := sm[f.key]
			if !ok || isNull(fv) {
				missing(path + ".StatisticValues." + f.key)
				continue
			}
			x, err := cbor.AsFloat64(fv)
			if err != nil {
				return di, errSerialization("%s.StatisticValues.%s: %v", path, f.key, err)
			}
			*f.dst = x
		}
		d.StatisticValues = &ss
	}
	for _, f := range []struct {
		key string
		dst *[]float64
	}{{"Values", &d.Values}, {"Counts", &d.Counts}} {
		v, ok := m[f.key]
		if !ok || isNull(v) {
			continue
		}
		list, ok := v.(cbor.List)
		if !ok {
			return di, decodeError(path+"."+f.key, v, "a list")
		}
		*f.dst = make([]float64, 0, len(list))
		for j, item := range list {
			x, err := cbor.AsFloat64(item)
			if err != nil {
				return di, errSerialization("%s.%s.member.%d: %v", path, f.key, j+1, err)
			}
			*f.dst = append(*f.dst, x)
		}
	}
	if v, ok := m["StorageResolution"]; ok && !isNull(v) {
		n, err := cbor.AsInt32(v)
		if err != nil {
			return di, errSerialization("%s.StorageResolution: %v", path, err)
		}
		d.StorageResolution = int(n)
	}
	return di, nil
}

// validate applies CloudWatch's checks in order and returns the first
// failure.
func validate(in *putMetricDataInput, now time.Time) *apiError {
	if in.namespace == nil {
		return errMissing("Namespace")
	}
	if aerr := validNamespace(*in.namespace); aerr != nil {
		return aerr
	}
	if in.hasEntity {
		return errInvalidValue("cwfake does not support EntityMetricData")
	}
	if !in.hasData {
		return errMissing("MetricData")
	}
	if len(in.data) > MaxDatums {
		return errInvalidValue("The collection MetricData must not have a size greater than %d.", MaxDatums)
	}
	if in.missingFound {
		return errMissing(in.missing)
	}
	for i := range in.data {
		if aerr := validDatum(fmt.Sprintf("MetricData.member.%d", i+1), &in.data[i], now); aerr != nil {
			return aerr
		}
	}
	return nil
}

func validNamespace(ns string) *apiError {
	if len(ns) < 1 || len(ns) > maxNameLen || strings.TrimSpace(ns) == "" || strings.HasPrefix(ns, reservedPrefix) {
		return errBadValue(ns, "Namespace")
	}
	for _, r := range ns {
		ok := r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || strings.ContainsRune(".-_/#: ", r)
		if !ok {
			return errBadValue(ns, "Namespace")
		}
	}
	return nil
}

// validASCII reports whether s is 1..max printable ASCII characters with at
// least one that is not a space.
func validASCII(s string, max int) bool {
	if len(s) < 1 || len(s) > max || strings.TrimSpace(s) == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func validNumber(x float64) bool {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return false
	}
	a := math.Abs(x)
	return a == 0 || a >= minMagnitude && a <= maxMagnitude
}

func validDatum(path string, di *datumIn, now time.Time) *apiError {
	d := &di.Datum
	if len(d.MetricName) < 1 || len(d.MetricName) > maxNameLen || strings.TrimSpace(d.MetricName) == "" {
		return errBadValue(d.MetricName, path+".MetricName")
	}
	if len(d.Dimensions) > MaxDimensions {
		return errInvalidValue("The collection %s.Dimensions must not have a size greater than %d.", path, MaxDimensions)
	}
	for j, dim := range d.Dimensions {
		dpath := fmt.Sprintf("%s.Dimensions.member.%d", path, j+1)
		if !validASCII(dim.Name, maxNameLen) || strings.HasPrefix(dim.Name, ":") {
			return errBadValue(dim.Name, dpath+".Name")
		}
		if !validASCII(dim.Value, maxDimValueLen) {
			return errBadValue(dim.Value, dpath+".Value")
		}
	}
	n := 0
	for _, set := range []bool{di.hasValue, d.StatisticValues != nil, d.Values != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return errCombination("At least one of the parameters %[1]s.Value, %[1]s.StatisticValues or %[1]s.Values must be specified.", path)
	case n > 1:
		return errCombination("The parameters %[1]s.Value, %[1]s.StatisticValues and %[1]s.Values are mutually exclusive and you have specified more than one.", path)
	}
	if di.hasValue && !validNumber(d.Value) {
		return errBadValue(d.Value, path+".Value")
	}
	if ss := d.StatisticValues; ss != nil {
		for _, f := range []struct {
			name string
			v    float64
		}{{"SampleCount", ss.SampleCount}, {"Sum", ss.Sum}, {"Minimum", ss.Minimum}, {"Maximum", ss.Maximum}} {
			if !validNumber(f.v) {
				return errBadValue(f.v, path+".StatisticValues."+f.name)
			}
		}
	}
	if len(d.Values) > MaxValues {
		return errInvalidValue("The collection %s.Values must not have a size greater than %d.", path, MaxValues)
	}
	for j, x := range d.Values {
		if !validNumber(x) {
			return errBadValue(x, fmt.Sprintf("%s.Values.member.%d", path, j+1))
		}
	}
	if d.Counts != nil && len(d.Counts) != len(d.Values) {
		return errInvalidValue("The parameters %[1]s.Values and %[1]s.Counts must be of the same size.", path)
	}
	for j, x := range d.Counts {
		if !validNumber(x) {
			return errBadValue(x, fmt.Sprintf("%s.Counts.member.%d", path, j+1))
		}
	}
	if d.Unit != "" && !slices.Contains(standardUnits, cwtypes.StandardUnit(d.Unit)) {
		return errBadValue(d.Unit, path+".Unit")
	}
	if r := d.StorageResolution; r != 0 && r != 1 && r != 60 {
		return errBadValue(r, path+".StorageResolution")
	}
	if !d.Timestamp.IsZero() {
		if d.Timestamp.Before(now.Add(-maxPast)) {
			return errInvalidValue("The parameter %s.Timestamp must specify a time no more than two weeks in the past.", path)
		}
		if d.Timestamp.After(now.Add(maxFuture)) {
			return errInvalidValue("The parameter %s.Timestamp must specify a time no more than two hours in the future.", path)
		}
	}
	return nil
}
