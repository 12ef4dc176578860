package sandboxv1

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the REST API, served at /openapi.json.
// Its schemas mirror the types of this package; openapi_test.go keeps them in step.
//
//go:embed openapi.json
var OpenAPI []byte
