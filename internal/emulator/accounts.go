package emulator

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Accounts (docs/emulator.md, "Accounts and roles"). Off until something is
// configured: then every caller is the default account and nothing is
// checked, as before accounts existed. On once a role, an access key's
// account or a file system owned by another account than the default is
// configured: each request is made by the account of its access key (the
// SigV4 Authorization header's), temporary keys issued by AssumeRole must
// carry their session token and be unexpired, and an EFS call on a file
// system (or its access points, mount targets, tags) of another account is
// AccessDeniedException. Listings show the caller's file systems only.
//
// The emulator verifies no signature: a static key's secret is not known to
// it. Identity is the access key ID; for issued keys, the session token too.

// DefaultAccount is the account of every static access key not assigned
// another one, and the owner of file systems no owner was set for.
const DefaultAccount = accountID

// Role is an IAM role callers may assume through STS AssumeRole.
type Role struct {
	// ARN is arn:aws:iam::<12-digit account>:role/[path/]name.
	ARN string `json:"arn"`
	// ExternalID, when set, must be given by AssumeRole (the trust policy's
	// sts:ExternalId condition); otherwise AccessDenied.
	ExternalID string `json:"externalId,omitempty"`
}

var (
	roleARNRE     = regexp.MustCompile(`^arn:aws:iam::([0-9]{12}):role/((?:[\x21-\x7e]+/)?)([\w+=,.@-]{1,64})$`)
	accountRE     = regexp.MustCompile(`^[0-9]{12}$`)
	accessKeyRE   = regexp.MustCompile(`^[\w]{3,128}$`)
	sessionNameRE = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)
	externalIDRE  = regexp.MustCompile(`^[\w+=,.@:/-]+$`)
)

// validExternalID: 2 to 1224 characters of [\w+=,.@:/-] (regexp repeats stop at 1000).
func validExternalID(s string) bool {
	return len(s) >= 2 && len(s) <= 1224 && externalIDRE.MatchString(s)
}

// parseRole checks r.ARN and returns the role's account and name.
func parseRole(r Role) (account, name string, err error) {
	m := roleARNRE.FindStringSubmatch(r.ARN)
	if m == nil {
		return "", "", fmt.Errorf("role ARN %q is not arn:aws:iam::<12 digits>:role/[path/]name", r.ARN)
	}
	if r.ExternalID != "" && !validExternalID(r.ExternalID) {
		return "", "", fmt.Errorf("role %s: external ID must be 2 to 1224 characters of [\\w+=,.@:/-]", r.ARN)
	}
	return m[1], m[3], nil
}

// session is a set of temporary credentials AssumeRole issued.
type session struct {
	AccessKeyID  string    `json:"akid"`
	Secret       string    `json:"secret"`
	SessionToken string    `json:"token"`
	RoleARN      string    `json:"role"`
	SessionName  string    `json:"name"`
	Account      string    `json:"account"`
	Expires      time.Time `json:"expires"`
}

// assumedRoleARN is the session's identity as STS names it.
func (s *session) assumedRoleARN() string {
	_, name, _ := parseRole(Role{ARN: s.RoleARN})
	return fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/%s", s.Account, name, s.SessionName)
}

// caller is who made a request.
type caller struct {
	account string
	arn     string // for messages: the assumed role's session, or the key's user
}

// The store's bucket for accounts: keys "role/<arn>", "key/<access key ID>"
// (value: the account) and "session/<access key ID>".
var bucketAccounts = []byte("accounts")

// accounts holds roles, access key accounts and issued sessions; safe for
// concurrent use. File system owners are in the state's records.
type accounts struct {
	store *store

	mu       sync.Mutex
	roles    map[string]Role
	keys     map[string]string
	sessions map[string]*session
}

func loadAccounts(st *store, now time.Time) (*accounts, error) {
	a := &accounts{store: st, roles: map[string]Role{}, keys: map[string]string{}, sessions: map[string]*session{}}
	var expired [][]byte
	err := st.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketAccounts)
		if err != nil {
			return err
		}
		if err := b.ForEach(func(k, v []byte) error {
			kind, id, _ := strings.Cut(string(k), "/")
			switch kind {
			case "role":
				var r Role
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("corrupt record accounts/%s: %w", k, err)
				}
				a.roles[r.ARN] = r
			case "key":
				a.keys[id] = string(v)
			case "session":
				s := new(session)
				if err := json.Unmarshal(v, s); err != nil {
					return fmt.Errorf("corrupt record accounts/%s: %w", k, err)
				}
				if now.After(s.Expires) {
					expired = append(expired, append([]byte(nil), k...))
					return nil
				}
				a.sessions[s.AccessKeyID] = s
			}
			return nil
		}); err != nil {
			return err
		}
		for _, k := range expired { // no use keeping them
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	return a, err
}

func (a *accounts) configured() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.roles) > 0 || len(a.keys) > 0
}

func (a *accounts) putRole(r Role) error {
	if _, _, err := parseRole(r); err != nil {
		return err
	}
	if err := a.store.commit(func(tx *bolt.Tx) error { return put(tx, bucketAccounts, "role/"+r.ARN, r) }); err != nil {
		return err
	}
	a.mu.Lock()
	a.roles[r.ARN] = r
	a.mu.Unlock()
	return nil
}

func (a *accounts) setKeyAccount(key, account string) error {
	if !accessKeyRE.MatchString(key) {
		return fmt.Errorf("access key ID %q: want 3 to 128 characters of [A-Za-z0-9_]", key)
	}
	if !accountRE.MatchString(account) {
		return fmt.Errorf("account %q is not 12 digits", account)
	}
	if err := a.store.commit(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketAccounts).Put([]byte("key/"+key), []byte(account))
	}); err != nil {
		return err
	}
	a.mu.Lock()
	a.keys[key] = account
	a.mu.Unlock()
	return nil
}

func (a *accounts) snapshot() (roles []Role, keys map[string]string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.roles {
		roles = append(roles, r)
	}
	keys = make(map[string]string, len(a.keys))
	for k, v := range a.keys {
		keys[k] = v
	}
	return roles, keys
}

// Codes of authentication and authorization errors, in EFS's spelling
// (stsCode translates them for STS).
const (
	codeAccessDenied       = "AccessDeniedException"
	codeUnrecognizedClient = "UnrecognizedClientException"
	codeExpiredToken       = "ExpiredTokenException"
)

// issuedKeyPrefix starts the access key IDs of temporary credentials, as AWS's.
const issuedKeyPrefix = "ASIA"

// identify names the caller of r from its Authorization header (and, for a
// temporary key, X-Amz-Security-Token). A request without one is the
// default account's (the emulator never required signatures).
func (a *accounts) identify(r *http.Request, now time.Time) (caller, *apiError) {
	key, _ := sigV4Scope(r.Header.Get("Authorization"))
	if key == "" {
		return defaultCaller, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sessions[key]; s != nil {
		if r.Header.Get("X-Amz-Security-Token") != s.SessionToken {
			return caller{}, errorf(http.StatusForbidden, codeUnrecognizedClient, "The security token included in the request is invalid.")
		}
		if !now.Before(s.Expires) {
			return caller{}, errorf(http.StatusForbidden, codeExpiredToken, "The security token included in the request is expired")
		}
		return caller{account: s.Account, arn: s.assumedRoleARN()}, nil
	}
	if strings.HasPrefix(key, issuedKeyPrefix) {
		// Temporary keys are only ever this emulator's own (or expired and
		// forgotten at a restart).
		return caller{}, errorf(http.StatusForbidden, codeUnrecognizedClient, "The security token included in the request is invalid.")
	}
	account := a.keys[key]
	if account == "" {
		account = DefaultAccount
	}
	return caller{account: account, arn: fmt.Sprintf("arn:aws:iam::%s:user/%s", account, key)}, nil
}

// sigV4Scope reads the access key ID and the service name of the credential
// scope from a SigV4 Authorization header:
// "AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/sts/aws4_request, ...".
func sigV4Scope(auth string) (key, service string) {
	_, rest, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return "", ""
	}
	cred, _, _ := strings.Cut(rest, ",")
	parts := strings.Split(strings.TrimSpace(cred), "/")
	if len(parts) != 5 {
		return parts[0], ""
	}
	return parts[0], parts[3]
}

// assumeRole checks in and issues credentials valid until now+duration.
func (a *accounts) assumeRole(in *AssumeRoleInput, who caller, now time.Time, rnd *lockedRand) (*session, *apiError) {
	a.mu.Lock()
	role, ok := a.roles[in.RoleArn]
	a.mu.Unlock()
	if !ok || (role.ExternalID != "" && in.ExternalId != role.ExternalID) {
		// STS says the same for a missing role and a failed condition.
		return nil, errorf(http.StatusForbidden, codeAccessDenied,
			"User: %s is not authorized to perform: sts:AssumeRole on resource: %s", who.arn, in.RoleArn)
	}
	account, _, _ := parseRole(role)
	s := &session{
		AccessKeyID:  issuedKeyPrefix + strings.ToUpper(rnd.hex(16)),
		Secret:       rnd.hex(40),
		SessionToken: "FwoGZXIvYXdzE" + rnd.hex(180),
		RoleARN:      role.ARN,
		SessionName:  in.RoleSessionName,
		Account:      account,
		Expires:      now.Add(time.Duration(in.DurationSeconds) * time.Second).UTC().Truncate(time.Second),
	}
	if err := a.store.commit(func(tx *bolt.Tx) error { return put(tx, bucketAccounts, "session/"+s.AccessKeyID, s) }); err != nil {
		return nil, internalError(err)
	}
	a.mu.Lock()
	a.sessions[s.AccessKeyID] = s
	for k, old := range a.sessions { // keep the map bounded by live sessions
		if now.After(old.Expires) {
			delete(a.sessions, k)
		}
	}
	a.mu.Unlock()
	return s, nil
}

func accessDenied(who caller, op Op) *apiError {
	return errorf(http.StatusForbidden, codeAccessDenied,
		"User: %s is not authorized to perform: elasticfilesystem:%s on the specified resource", who.arn, op)
}
