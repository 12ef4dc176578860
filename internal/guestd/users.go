package guestd

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// maxAccountFileBytes bounds how much of /etc/passwd or /etc/group is read: the
// files belong to the sandbox and may be hostile.
const maxAccountFileBytes = 4 << 20

// errUnknownUser reports a user name that is not in the sandbox's passwd file.
var errUnknownUser = errors.New("unknown user")

// account is one user from the sandbox's passwd file, with its groups.
type account struct {
	Name   string
	UID    uint32
	GID    uint32
	Home   string
	Groups []uint32 // supplementary groups from the group file
}

// accountDB holds the parsed passwd and group files of the sandbox. The daemon
// is a static binary, so it reads the files itself instead of going through NSS.
type accountDB struct {
	users     []account
	groupName map[uint32]string
	members   map[string][]uint32 // user name -> supplementary gids
}

// loadAccounts reads and parses the passwd and group files. A missing group file
// is not an error: the accounts then have no supplementary groups.
func loadAccounts(passwdPath, groupPath string) (*accountDB, error) {
	passwd, err := readBounded(passwdPath)
	if err != nil {
		return nil, fmt.Errorf("read users from %s: %w", passwdPath, err)
	}
	group, err := readBounded(groupPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read groups from %s: %w", groupPath, err)
	}
	db := &accountDB{users: parsePasswd(passwd)}
	db.groupName, db.members = parseGroup(group)
	for i := range db.users {
		db.users[i].Groups = db.members[db.users[i].Name]
	}
	return db, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxAccountFileBytes))
}

// parsePasswd parses passwd(5) lines "name:pw:uid:gid:gecos:home:shell" and
// skips malformed ones.
func parsePasswd(data []byte) []account {
	var users []account
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 7 || f[0] == "" {
			continue
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		users = append(users, account{Name: f[0], UID: uint32(uid), GID: uint32(gid), Home: f[5]})
	}
	return users
}

// parseGroup parses group(5) lines "name:pw:gid:member,member" into gid names
// and each member's supplementary gids; malformed lines are skipped.
func parseGroup(data []byte) (map[uint32]string, map[string][]uint32) {
	names := map[uint32]string{}
	members := map[string][]uint32{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] == "" {
			continue
		}
		gid, err := strconv.ParseUint(f[2], 10, 32)
		if err != nil {
			continue
		}
		if _, ok := names[uint32(gid)]; !ok {
			names[uint32(gid)] = f[0]
		}
		for _, m := range strings.Split(f[3], ",") {
			if m != "" && len(members[m]) < 256 {
				members[m] = append(members[m], uint32(gid))
			}
		}
	}
	return names, members
}

// lookup finds a user by name.
func (db *accountDB) lookup(name string) (account, error) {
	for _, u := range db.users {
		if u.Name == name {
			return u, nil
		}
	}
	return account{}, fmt.Errorf("user %q: %w", name, errUnknownUser)
}

// userName names uid, or gives the number when the passwd file does not know it.
func (db *accountDB) userName(uid uint32) string {
	for _, u := range db.users {
		if u.UID == uid {
			return u.Name
		}
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// groupNameOf names gid, or gives the number when the group file does not know it.
func (db *accountDB) groupNameOf(gid uint32) string {
	if n, ok := db.groupName[gid]; ok {
		return n
	}
	return strconv.FormatUint(uint64(gid), 10)
}

// parseBasicUser extracts the user name from an "Authorization: Basic
// base64(name:)" header value, as envd's clients send it. ok is false when the
// header is absent; an error reports a malformed header or name.
func parseBasicUser(header string) (name string, ok bool, err error) {
	if header == "" {
		return "", false, nil
	}
	scheme, payload, found := strings.Cut(header, " ")
	if !found || !strings.EqualFold(scheme, "Basic") {
		return "", false, errors.New("authorization header: want Basic scheme")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(payload))
	if err != nil {
		return "", false, fmt.Errorf("authorization header: decode base64: %w", err)
	}
	name, _, _ = strings.Cut(string(raw), ":")
	if err := validUserName(name); err != nil {
		return "", false, fmt.Errorf("authorization header: %w", err)
	}
	return name, true, nil
}

// validUserName rejects names that cannot appear in a passwd file.
func validUserName(name string) error {
	if name == "" {
		return errors.New("empty user name")
	}
	if len(name) > 256 {
		return errors.New("user name longer than 256 bytes")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x21 || c == ':' || c == 0x7f || c == '/' {
			return fmt.Errorf("user name %q: invalid byte %#x", name, c)
		}
	}
	return nil
}
