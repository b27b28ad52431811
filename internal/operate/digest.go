package operate

import (
	"crypto/sha1"
	"encoding/hex"
)

// OwnerSalt starts what OwnerDigest hashes: the same for every engine, so
// that all name one owner alike. An engine that computes the digest
// elsewhere (the Redis engine's revoke script) hashes OwnerSalt followed by
// the token.
const OwnerSalt = "routelock owner digest\x00"

// OwnerDigest returns the name by which an engine's Inspect, List and
// Revoke show the owner of token (lockcore.Holder.Owner,
// lockcore.Revocation.Owner): the first 12 hex digits of SHA-1 over
// OwnerSalt and the token. It reveals nothing usable of the token, and lets
// whoever has one (lifecycle.Lease's Token) find its hold in a listing.
func OwnerDigest(token string) string {
	sum := sha1.Sum([]byte(OwnerSalt + token))
	return hex.EncodeToString(sum[:6])
}
