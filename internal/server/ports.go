package server

// DefaultIngressDomain is the domain of the ingress host names when the
// server is given none: *.localhost resolves to the loopback address
// (RFC 6761), in curl and browsers alike.
const DefaultIngressDomain = "localhost"

// ingressDomain is the domain under which {port}-{sandbox} names route to
// sandbox ports.
func (s *Server) ingressDomain() string {
	if s.cfg.IngressDomain == "" {
		return DefaultIngressDomain
	}
	return s.cfg.IngressDomain
}
