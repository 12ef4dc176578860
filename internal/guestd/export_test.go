package guestd

// SetBeforeReplace makes every upload call f(target) between its last write
// and its replacement of target, until the returned function is called.
func SetBeforeReplace(f func(target string)) (restore func()) {
	beforeReplace = f
	return func() { beforeReplace = nil }
}
