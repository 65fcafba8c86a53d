package api

import "time"

// SetUploadLockWait changes how long an upload waits for another process's
// lock file until the test ends (restore).
func SetUploadLockWait(d time.Duration) (restore func()) {
	old := uploadLockWait
	uploadLockWait = d
	return func() { uploadLockWait = old }
}

// PollCacheStats reports the poll cache's entries and hits (tests).
func (s *Server) PollCacheStats() (entries int, hits uint64) {
	if s.polls == nil {
		return 0, 0
	}
	return s.polls.stats()
}
