package main

import (
	"fmt"
	"strconv"
	"time"
)

// minutes is a flag.Value in upstream's syntax for
// --vol-metrics-refresh-period: a (fractional) number of minutes, such as
// "240" or "0.5". A Go duration ("4h") is accepted too.
type minutes time.Duration

func (m *minutes) String() string {
	return strconv.FormatFloat(time.Duration(*m).Minutes(), 'g', -1, 64)
}

func (m *minutes) Set(s string) error {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f <= 0 {
			return fmt.Errorf("%q minutes: must be positive", s)
		}
		*m = minutes(time.Duration(f * float64(time.Minute)))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q: want a positive number of minutes (or a duration such as 4h)", s)
	}
	*m = minutes(d)
	return nil
}
