package efs

import (
	"testing"
	"time"
)

// Backoff is full jitter under a ceiling that doubles per retry up to
// maxBackoff, and the ceiling is reached: sleeps are spread, not fixed.
func TestBackoffIsFullJitterUnderADoublingCap(t *testing.T) {
	p := &retryPolicy{baseBackoff: 100 * time.Millisecond, maxBackoff: time.Second}
	tests := []struct {
		retry   int
		ceiling time.Duration
	}{
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{4, time.Second},
		{1000, time.Second}, // no overflow however long the burst
	}
	for _, tt := range tests {
		var hi time.Duration
		lo := tt.ceiling
		for range 2000 {
			d := p.backoff(tt.retry)
			if d < 0 || d > tt.ceiling {
				t.Fatalf("retry %d: backoff %v outside [0, %v]", tt.retry, d, tt.ceiling)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		// 2,000 uniform draws land in the lowest and highest tenth.
		if lo > tt.ceiling/10 || hi < tt.ceiling*9/10 {
			t.Errorf("retry %d: draws spread only over [%v, %v] of [0, %v]", tt.retry, lo, hi, tt.ceiling)
		}
	}
}
