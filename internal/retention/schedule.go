package retention

import "time"

// Due reports whether a periodic task last run at last is due at now. every
// <= 0 disables it; a zero last (never run) is due at once.
func Due(now, last time.Time, every time.Duration) bool {
	if every <= 0 {
		return false
	}
	return last.IsZero() || !now.Before(last.Add(every))
}

// Next returns when a periodic task last run at last should run next: now
// when it never ran or is overdue, else last+every. every <= 0 returns the
// zero time (never).
func Next(now, last time.Time, every time.Duration) time.Time {
	if every <= 0 {
		return time.Time{}
	}
	if last.IsZero() {
		return now
	}
	if t := last.Add(every); t.After(now) {
		return t
	}
	return now
}

// Schedule is a sandbox's snapshot timetable. A full snapshot includes the
// disk, so it also counts as the latest disk snapshot.
type Schedule struct {
	// DiskEvery is the period of disk snapshots; 0 disables them.
	DiskEvery time.Duration
	// FullEvery is the period of full snapshots; 0 disables them.
	FullEvery time.Duration
}

// Due reports which snapshot, if any, is due at now given when the last of
// each kind was taken (zero: never). A due full snapshot wins over a disk
// one.
func (s Schedule) Due(now, lastDisk, lastFull time.Time) (Kind, bool) {
	if Due(now, lastFull, s.FullEvery) {
		return KindFull, true
	}
	if Due(now, latest(lastDisk, lastFull), s.DiskEvery) {
		return KindDisk, true
	}
	return "", false
}

// Next returns the next snapshot to take and when; ok is false when both
// kinds are disabled. On a tie the full snapshot is returned.
func (s Schedule) Next(now, lastDisk, lastFull time.Time) (kind Kind, at time.Time, ok bool) {
	full := Next(now, lastFull, s.FullEvery)
	disk := Next(now, latest(lastDisk, lastFull), s.DiskEvery)
	switch {
	case full.IsZero() && disk.IsZero():
		return "", time.Time{}, false
	case disk.IsZero() || (!full.IsZero() && !disk.Before(full)):
		return KindFull, full, true
	default:
		return KindDisk, disk, true
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
