package server

import "github.com/spacesandbox/space/internal/service"

// AuditReader reads the credential audit log back (service.AuditReader).
type AuditReader = service.AuditReader

var errNoCredentials = service.ErrNoCredentials
