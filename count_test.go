package gpumem

import (
	"math"
	"testing"
)

func TestThousands(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"},
		{999, "999"},
		{1000, "1,000"},
		{-1024, "-1,024"},
		{-999, "-999"},
		{123456, "123,456"},
		{6_738_415_616, "6,738,415,616"},
		{math.MaxInt64, "9,223,372,036,854,775,807"},
		{math.MinInt64, "-9,223,372,036,854,775,808"},
	}
	for _, tc := range tests {
		if got := Thousands(tc.in); got != tc.want {
			t.Errorf("Thousands(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
