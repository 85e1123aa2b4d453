package fakefault

import (
	"slices"
	"testing"
)

// hits sends n requests past the last fault added and returns which fired.
func hits(s *Set[string], n int) []bool {
	a := s.list[len(s.list)-1]
	out := make([]bool, n)
	for i := range out {
		out[i] = s.Hit(a)
	}
	return out
}

func TestSetGate(t *testing.T) {
	for _, tt := range []struct {
		name string
		gate Gate
		want []bool
	}{
		{"always", Gate{}, []bool{true, true, true}},
		{"count", Gate{Count: 2}, []bool{true, true, false}},
		{"skip then count", Gate{Skip: 1, Count: 1}, []bool{false, true, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSet[string](nil)
			id := s.Add("f", tt.gate)
			got := hits(s, len(tt.want))
			if !slices.Equal(got, tt.want) {
				t.Errorf("fired = %v, want %v", got, tt.want)
			}
			want := 0
			for _, h := range tt.want {
				if h {
					want++
				}
			}
			if n := s.Fired(id); n != want {
				t.Errorf("Fired = %d, want %d", n, want)
			}
			s.Remove(id)
			if n := s.Fired(id); n != 0 {
				t.Errorf("Fired after Remove = %d, want 0", n)
			}
		})
	}
}

func TestSetSeededDrawsRepeat(t *testing.T) {
	run := func() []bool {
		s := NewSet[string](Seeded(7))
		s.Add("f", Gate{Probability: 0.5})
		return hits(s, 64)
	}
	a, b := run(), run()
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different draws:\n%v\n%v", a, b)
	}
	if !slices.Contains(a, true) || !slices.Contains(a, false) {
		t.Errorf("probability 0.5 over 64 draws fired %v", a)
	}
}

func TestSetScanInOrder(t *testing.T) {
	s := NewSet[string](nil)
	s.Add("a", Gate{Count: 1})
	s.Add("b", Gate{})
	var got []string
	for range 2 {
		s.Scan(func(a *Armed[string], hit func() bool) {
			if hit() {
				got = append(got, a.Fault)
			}
		})
	}
	if want := []string{"a", "b", "b"}; !slices.Equal(got, want) {
		t.Errorf("fired = %v, want %v", got, want)
	}
}
