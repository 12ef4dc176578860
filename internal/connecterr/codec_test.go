package connecterr

import "encoding/json"

// emptyMsg and jsonCodec let the tests run a Connect service without
// generated code.
type emptyMsg struct{}

type jsonCodec struct{}

func (jsonCodec) Name() string                    { return "json" }
func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
