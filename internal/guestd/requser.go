package guestd

import (
	"errors"
	"fmt"
	"net/http"
	"os"
)

// caller is the sandbox user a request acts as, with the accounts it was
// resolved from (reused to name owners in EntryInfo).
type caller struct {
	account
	db *accountDB
}

// userFromHeader resolves the user of an RPC: Basic auth, else Init's default
// user, else root.
func (d *Daemon) userFromHeader(h http.Header) (caller, error) {
	name, ok, err := parseBasicUser(h.Get("Authorization"))
	if err != nil {
		return caller{}, fmt.Errorf("%w: %w", errUnknownUser, err)
	}
	if !ok {
		name = ""
	}
	return d.userNamed(name)
}

// userNamed resolves name, or the default user when name is empty: the
// image's User where the tree has that account, else Init's default user.
func (d *Daemon) userNamed(name string) (caller, error) {
	fromDefault := false
	if name == "" {
		if c, err := d.imageUser(); err == nil {
			return c, nil
		}
		name, _ = d.ident.defaults()
		fromDefault = name != ""
	}
	if name == "" {
		name = "root"
	}
	if err := validUserName(name); err != nil {
		return caller{}, fmt.Errorf("%w: %w", errUnknownUser, err)
	}
	db, err := loadAccounts(d.cfg.PasswdPath, d.cfg.GroupPath)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return caller{}, err
		}
		db = &accountDB{groupName: map[uint32]string{}}
	}
	u, err := db.lookup(name)
	if err != nil && fromDefault {
		// The default user comes from the platform (E2B's "user"), not the
		// caller; a template without that account runs as root instead of
		// refusing every request.
		name = "root"
		u, err = db.lookup(name)
	}
	if err != nil {
		if name != "root" {
			return caller{}, err
		}
		// A minimal root filesystem may have no passwd file; root still exists.
		u = account{Name: "root", Home: "/root"}
	}
	return caller{account: u, db: db}, nil
}

// resolve resolves a client path for this caller (relative to the home).
func (c caller) resolve(p string) (string, error) { return resolvePath(p, c.Home) }
