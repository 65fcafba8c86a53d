package billing

import (
	"testing"
	"time"
)

func day(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 9, 30, 0, 0, time.UTC) }

// TestPeriodEnd is the calendar, row by row: anchored month ends clamp to
// short months and come back, leap years, years, weeks, days, counts.
func TestPeriodEnd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		anchor   time.Time
		interval Interval
		count, n int
		want     time.Time
	}{
		{"n=0 is the anchor", day(2026, 1, 31), Month, 1, 0, day(2026, 1, 31)},
		{"Jan 31 + 1 month is Feb 28", day(2026, 1, 31), Month, 1, 1, day(2026, 2, 28)},
		{"Jan 31 + 1 month in a leap year is Feb 29", day(2028, 1, 31), Month, 1, 1, day(2028, 2, 29)},
		{"back to the 31st in March", day(2026, 1, 31), Month, 1, 2, day(2026, 3, 31)},
		{"30 days in April", day(2026, 1, 31), Month, 1, 3, day(2026, 4, 30)},
		{"31 again in May", day(2026, 1, 31), Month, 1, 4, day(2026, 5, 31)},
		{"Jan 30 + 1 month is Feb 28", day(2026, 1, 30), Month, 1, 1, day(2026, 2, 28)},
		{"Jan 30 + 2 months is Mar 30", day(2026, 1, 30), Month, 1, 2, day(2026, 3, 30)},
		{"Aug 31 + 1 month is Sep 30", day(2026, 8, 31), Month, 1, 1, day(2026, 9, 30)},
		{"across the year end", day(2026, 11, 30), Month, 1, 3, day(2027, 2, 28)},
		{"Dec 31 + 2 months is Feb 28", day(2026, 12, 31), Month, 1, 2, day(2027, 2, 28)},
		{"twelve months is a year", day(2026, 1, 31), Month, 1, 12, day(2027, 1, 31)},
		{"quarterly from Nov 30", day(2026, 11, 30), Month, 3, 1, day(2027, 2, 28)},
		{"quarterly, second quarter", day(2026, 11, 30), Month, 3, 2, day(2027, 5, 30)},
		{"Feb 29 + 1 year is Feb 28", day(2028, 2, 29), Year, 1, 1, day(2029, 2, 28)},
		{"Feb 29 + 4 years is Feb 29", day(2028, 2, 29), Year, 1, 4, day(2032, 2, 29)},
		{"every 2 years", day(2026, 6, 15), Year, 2, 2, day(2030, 6, 15)},
		{"a week", day(2026, 12, 29), Week, 1, 1, day(2027, 1, 5)},
		{"fortnights", day(2026, 1, 1), Week, 2, 3, day(2026, 2, 12)},
		{"days", day(2026, 2, 27), Day, 1, 2, day(2026, 3, 1)},
		{"30-day periods", day(2026, 1, 31), Day, 30, 1, day(2026, 3, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := PeriodEnd(tc.anchor, tc.interval, tc.count, tc.n); !got.Equal(tc.want) {
				t.Fatalf("PeriodEnd(%s, %s, %d, %d) = %s, want %s", tc.anchor.Format(time.DateOnly), tc.interval, tc.count, tc.n,
					got.Format(time.RFC3339), tc.want.Format(time.RFC3339))
			}
		})
	}
}

// TestPeriodEndAnchorsEveryPeriod: a year of monthly periods from every day
// of January keeps its day wherever the month has it (no drift).
func TestPeriodEndAnchorsEveryPeriod(t *testing.T) {
	for d := 1; d <= 31; d++ {
		anchor := day(2027, 1, d)
		prev := anchor
		for n := 1; n <= 24; n++ {
			end := PeriodEnd(anchor, Month, 1, n)
			want := d
			if last := daysIn(end.Year(), end.Month()); want > last {
				want = last
			}
			if end.Day() != want || !end.After(prev) {
				t.Fatalf("anchor Jan %d, period %d ends %s", d, n, end.Format(time.DateOnly))
			}
			if h, m, _ := end.Clock(); h != 9 || m != 30 {
				t.Fatalf("time of day lost: %s", end)
			}
			prev = end
		}
	}
}

func TestIntervalAndCount(t *testing.T) {
	for _, i := range Intervals {
		if !Interval(i).Valid() {
			t.Errorf("%s not valid", i)
		}
	}
	if Interval("hour").Valid() || Interval("").Valid() {
		t.Error("hour or empty accepted")
	}
	for _, tc := range []struct {
		i     Interval
		count int
		ok    bool
	}{{Month, 1, true}, {Month, 0, false}, {Month, 36, true}, {Month, 37, false}, {Year, 3, true}, {Year, 4, false},
		{Week, 156, true}, {Week, 157, false}, {Day, 1095, true}, {Day, -1, false}} {
		if err := CheckCount(tc.i, tc.count); (err == nil) != tc.ok {
			t.Errorf("CheckCount(%s, %d) = %v", tc.i, tc.count, err)
		}
	}
}
