// Package billing is the calendar of recurring charges: billing intervals
// and the dates their periods end on. It is pure and deterministic, so
// workflows use it as freely as the API does.
//
// Periods are anchored: period n of a subscription ends at
// PeriodEnd(anchor, interval, count, n+1), computed from the anchor each
// time rather than by adding one interval to the previous end. A monthly
// subscription anchored on January 31 ends its periods on February 28 (29
// in a leap year), March 31, April 30, May 31: a short month clamps the day
// to its last, and the next month that has the anchor's day gets it back.
// Chaining would drift (Jan 31, Feb 28, Mar 28, ...); anchoring never does.
// Yearly periods anchored on February 29 end on February 28 in common
// years. Days and weeks are fixed lengths (24 h and 7 × 24 h, in UTC).
package billing

import (
	"fmt"
	"time"
)

// Interval is a billing interval unit.
type Interval string

// The billing intervals a subscription may use.
const (
	Day   Interval = "day"
	Week  Interval = "week"
	Month Interval = "month"
	Year  Interval = "year"
)

// Intervals lists the valid intervals, shortest first.
var Intervals = []string{string(Day), string(Week), string(Month), string(Year)}

// Valid reports whether i is one of the four intervals.
func (i Interval) Valid() bool {
	switch i {
	case Day, Week, Month, Year:
		return true
	}
	return false
}

// MaxIntervalCount bounds intervalCount (one period at most about 3 years
// of months, 52 weeks a year, ...): Stripe's bound, and enough for anyone.
const MaxIntervalCount = 36

// CheckCount reports whether count intervals of i make an acceptable period:
// at least 1, and no longer than three years.
func CheckCount(i Interval, count int) error {
	if count < 1 {
		return fmt.Errorf("must be at least 1")
	}
	limit := map[Interval]int{Day: 3 * 365, Week: 3 * 52, Month: MaxIntervalCount, Year: 3}[i]
	if limit > 0 && count > limit {
		return fmt.Errorf("must be at most %d for %s", limit, i)
	}
	return nil
}

// PeriodEnd returns the end of the n-th period after anchor, each period
// count intervals long: anchor itself for n = 0. Months and years keep the
// anchor's day of month, clamped to the last day of shorter months, and its
// time of day (in the anchor's location; the service keeps UTC).
func PeriodEnd(anchor time.Time, i Interval, count, n int) time.Time {
	steps := count * n
	switch i {
	case Day:
		return anchor.Add(time.Duration(steps) * 24 * time.Hour)
	case Week:
		return anchor.Add(time.Duration(steps) * 7 * 24 * time.Hour)
	case Month:
		return addMonths(anchor, steps)
	case Year:
		return addMonths(anchor, 12*steps)
	}
	panic(fmt.Sprintf("billing: unknown interval %q", i))
}

// addMonths moves t by months calendar months, clamping the day to the
// target month's last day.
func addMonths(t time.Time, months int) time.Time {
	y, m, d := t.Date()
	hh, mm, ss := t.Clock()
	total := int(m) - 1 + months
	ty, tm := y+total/12, total%12
	if tm < 0 {
		tm += 12
		ty--
	}
	target := time.Month(tm + 1)
	if last := daysIn(ty, target); d > last {
		d = last
	}
	return time.Date(ty, target, d, hh, mm, ss, t.Nanosecond(), t.Location())
}

// daysIn is the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
