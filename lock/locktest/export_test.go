package locktest

// SkipTouches makes m's admitted permits skip the touch that wakes the
// waiter behind them (see queue.Touches), for the meta-test's
// semaphore-no-touch fault.
func SkipTouches(m *Memory) {
	m.mu.Lock()
	m.noTouch = true
	m.mu.Unlock()
}
