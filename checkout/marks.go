package checkout

import (
	"context"
	"time"
)

// markDelay is how long a new session's "workflow started" mark waits to
// be written with the marks that follow it.
const markDelay = 20 * time.Millisecond

// markLater records behind the request that a new session's workflow is
// started. The mark only spares the repairer a start it would find done, so
// the create answers without waiting for it: the marks of the sessions
// created within markDelay go to the store in one statement instead of one
// write each on the store's single writer (the bench measured create at
// 0.79x bare StartWorkflow with the write in line, 0.86x without it). A mark
// lost to a crash costs the repairer one rejected start (AlreadyStarted),
// after which it marks the session itself.
func (s *Service) markLater(id string) {
	s.marksMu.Lock()
	defer s.marksMu.Unlock()
	s.marks = append(s.marks, id)
	if s.marking {
		return
	}
	s.marking = true
	go func() {
		for {
			time.Sleep(markDelay)
			if s.FlushMarks(context.Background()) == 0 {
				s.marksMu.Lock()
				if len(s.marks) == 0 {
					s.marking = false
					s.marksMu.Unlock()
					return
				}
				s.marksMu.Unlock()
			}
		}
	}()
}

// FlushMarks writes the pending "workflow started" marks now (the API calls
// it on shutdown) and answers how many it wrote. Marks the store refuses
// are left to the repairer.
func (s *Service) FlushMarks(ctx context.Context) int {
	s.marksMu.Lock()
	ids := s.marks
	s.marks = nil
	s.marksMu.Unlock()
	if len(ids) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Store.MarkWorkflowsStarted(ctx, ids); err != nil {
		s.log().Warn("workflow-started marks not written; the repairer will confirm those sessions", "sessions", len(ids), "err", err)
		return 0
	}
	return len(ids)
}
