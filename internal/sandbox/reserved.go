package sandbox

import "strings"

// Reserved keys. Routing and identity never read a sandbox's metadata or
// environment: a sandbox is found by its id, its tenant is its API key's,
// its node and execution are what the control plane placed. These keys are
// refused in tenant input all the same, so that nothing the platform sets
// or may come to set, and nothing a tool could take for the platform's
// word, is ever supplied by a tenant:
//
//   - metadata keys starting with "space." "space/" "space:" "e2b." "e2b/"
//     or "e2b:" (any case): the platform's namespaces, as Kubernetes
//     reserves "kubernetes.io/";
//   - the environment variables E2B's envd sets in every process
//     (E2B_SANDBOX, E2B_SANDBOX_ID, E2B_TEMPLATE_ID, E2B_TEAM_ID,
//     E2B_EVENTS_ADDRESS, E2B_ACCESS_TOKEN), and SPACE_SANDBOX_ID,
//     SPACE_EXEC_ID, SPACE_TENANT_ID, SPACE_NODE_ID.
//
// E2B_API_KEY, SPACE_API_KEY and SPACE_API_URL stay free: a tenant passes
// its own keys into its sandbox.

// reservedMetaPrefixes are the metadata namespaces of the platform.
var reservedMetaPrefixes = []string{"space.", "space/", "space:", "e2b.", "e2b/", "e2b:"}

// reservedEnv are the environment variables the platform reserves.
var reservedEnv = map[string]bool{
	"E2B_SANDBOX": true, "E2B_SANDBOX_ID": true, "E2B_TEMPLATE_ID": true, "E2B_TEAM_ID": true,
	"E2B_EVENTS_ADDRESS": true, "E2B_ACCESS_TOKEN": true,
	"SPACE_SANDBOX_ID": true, "SPACE_EXEC_ID": true, "SPACE_TENANT_ID": true, "SPACE_NODE_ID": true,
}

// ReservedMetadataKey reports whether metadata key k is the platform's.
func ReservedMetadataKey(k string) bool {
	k = strings.ToLower(strings.TrimSpace(k))
	for _, p := range reservedMetaPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// ReservedEnv reports whether environment variable k is the platform's.
// Names are matched as the guest's environment sees them: exactly.
func ReservedEnv(k string) bool { return reservedEnv[k] }
