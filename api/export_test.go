package api

// PollCacheStats reports the poll cache's entries and hits (tests).
func (s *Server) PollCacheStats() (entries int, hits uint64) {
	if s.polls == nil {
		return 0, 0
	}
	return s.polls.stats()
}
