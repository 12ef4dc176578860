package restapi

import (
	"net/http"

	"connectrpc.com/connect"

	filesystemv1 "github.com/spacesandbox/space/api/guest/v1/filesystem"
)

// handleStatFile answers GET /v1/sandboxes/{id}/files/stat?path=: the
// file's entry as a listing shows it, without listing its directory;
// not_found when there is no such file.
func (a *API) handleStatFile(w http.ResponseWriter, r *http.Request) {
	g, path, ok := a.fileTarget(w, r)
	if !ok {
		return
	}
	req := asUser(connect.NewRequest(&filesystemv1.StatRequest{Path: path}), r.URL.Query().Get("user"))
	resp, err := g.Files.Stat(r.Context(), req)
	if err != nil {
		a.writeError(w, r, GuestError("stat "+path, err))
		return
	}
	writeJSON(w, http.StatusOK, fileEntry(resp.Msg.GetEntry()))
}
