package e2bapi

import "net/http"

// Busy and quota answers, E2B's way. The e2b SDKs (2.51: withRateLimitRetry
// and apiErrorFromCode in its src/api) treat the two statuses so:
//
//   - 429: a request that can be replayed is sent again after Retry-After
//     seconds (an integer), up to `retries` times (3 by default) within
//     the request's timeout; then, or without the header, RateLimitError
//     "Rate limit exceeded, please try again later - <message>";
//   - 503: ServiceBusyError "Service temporarily unavailable, please retry
//     - <message>", never retried by the SDK.
//
// SPACE answers 429 for a tenant over its quota, a rate limit, and a
// sandbox with as many requests in flight as it takes; 503 when no node has
// room or a dependency is down (apierr). Every such E2B answer carries
// Retry-After: a quota frees as soon as one of the tenant's sandboxes is
// deleted (a kill already on its way, a timeout), so the SDK's few short
// retries ride out that overlap instead of failing a create that would
// pass a second later; a real excess still fails after them, with
// SPACE's message naming the quota.

// e2bRetryAfter is the Retry-After of E2B's 429 and 503 answers, in
// seconds.
const e2bRetryAfter = "1"

// setRetryAfter adds Retry-After to a 429 or 503 answer that has none.
func setRetryAfter(h http.Header, status int) {
	if (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) && h.Get("Retry-After") == "" {
		h.Set("Retry-After", e2bRetryAfter)
	}
}
