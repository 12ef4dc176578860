package filesystemv1

// EnvdCompatHeader, set to EnvdCompatE2B by the control plane's E2B proxy
// (and by no other caller), asks the guest daemon for envd's answers where
// they differ from SPACE's own: Remove of a missing path succeeds, as
// envd's does, where SPACE's API reports it not found. The proxy drops the
// header from what the client sent, so only the E2B route sets it.
const (
	EnvdCompatHeader = "Space-Envd-Compat"
	EnvdCompatE2B    = "e2b"
)
