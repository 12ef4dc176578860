package reconcile

import (
	"sync"
	"time"
)

// queue is a keyed work queue: a key waiting is queued once however often it
// is added, and a key is never handed to two workers at once (an add while it
// is being processed queues it again after Done), as in client-go's workqueue.
type queue struct {
	mu         sync.Mutex // guards every field below
	cond       *sync.Cond
	order      []string
	dirty      map[string]bool
	processing map[string]bool
	shutdown   bool
}

func newQueue() *queue {
	q := &queue{dirty: map[string]bool{}, processing: map[string]bool{}}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *queue) add(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown || q.dirty[key] {
		return
	}
	q.dirty[key] = true
	if q.processing[key] {
		return
	}
	q.order = append(q.order, key)
	q.cond.Signal()
}

func (q *queue) addAfter(key string, d time.Duration) {
	if d <= 0 {
		q.add(key)
		return
	}
	time.AfterFunc(d, func() { q.add(key) })
}

// get blocks until a key is ready or the queue shuts down (ok false).
func (q *queue) get() (key string, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.order) == 0 && !q.shutdown {
		q.cond.Wait()
	}
	if q.shutdown {
		return "", false
	}
	key, q.order = q.order[0], q.order[1:]
	q.processing[key] = true
	delete(q.dirty, key)
	return key, true
}

func (q *queue) done(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.processing, key)
	if q.dirty[key] {
		q.order = append(q.order, key)
		q.cond.Signal()
	}
}

func (q *queue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	q.cond.Broadcast()
}
