package capability

import (
	"bytes"
	"crypto/ed25519"
	"math/big"
)

// Checks of verification keys (catalogue E-5). Go's ed25519.Verify takes any
// 32 bytes that decode to a curve point, and a point of small order signs
// for everyone: with the identity point as the key, the signature
// (identity, 0) verifies every message; with the all-zero key (order 4) one
// message in four verifies with it. A key set must never hold such a key.

// smallOrderY are the y coordinates (little endian, sign bit clear) of the
// eight points of order 1, 2, 4 and 8, and the two non-canonical encodings
// (p and p+1) of y = 0 and y = 1. The list is libsodium's
// ge25519_has_small_order blocklist.
var smallOrderY = [][32]byte{
	{},  // y = 0: order 4
	{1}, // y = 1: the identity, order 1
	{0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef, 0x98, 0xf0,
		0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05}, // order 8
	{0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10, 0x67, 0x0f,
		0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a}, // order 8
	yAbove(-1), // p-1 = -1: order 2
	yAbove(0),  // p = 0, non-canonical
	yAbove(1),  // p+1 = 1, non-canonical
}

// yAbove is the 32-byte little-endian encoding of p+d, p = 2^255-19.
func yAbove(d int) [32]byte {
	var b [32]byte
	for i := range b {
		b[i] = 0xff
	}
	b[31] = 0x7f
	b[0] = byte(0xed + d)
	return b
}

// smallOrder reports whether pub encodes a point of small order, in any
// encoding. It is cheap enough for every Verify.
func smallOrder(pub []byte) bool {
	if len(pub) != ed25519.PublicKeySize {
		return false
	}
	var y [32]byte
	copy(y[:], pub)
	y[31] &= 0x7f
	for _, bad := range smallOrderY {
		if bytes.Equal(y[:], bad[:]) {
			return true
		}
	}
	return false
}

var (
	fieldP = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 255), big.NewInt(19))
	// curveD is -121665/121666 mod p.
	curveD = func() *big.Int {
		d := new(big.Int).ModInverse(big.NewInt(121666), fieldP)
		d.Mul(d, big.NewInt(-121665))
		return d.Mod(d, fieldP)
	}()
)

// validPublicKey reports whether pub is a usable Ed25519 verification key:
// 32 bytes, the canonical encoding of a point on the curve, not of small
// order. Key sets are parsed rarely, so it uses math/big.
func validPublicKey(pub []byte) bool {
	if len(pub) != ed25519.PublicKeySize || smallOrder(pub) {
		return false
	}
	le := bytes.Clone(pub)
	sign := le[31] >> 7
	le[31] &= 0x7f
	for i, j := 0, len(le)-1; i < j; i, j = i+1, j-1 {
		le[i], le[j] = le[j], le[i]
	}
	y := new(big.Int).SetBytes(le)
	if y.Cmp(fieldP) >= 0 {
		return false // non-canonical
	}
	// x² = (y²-1) / (d·y²+1); the point exists when that has a root.
	y2 := new(big.Int).Mul(y, y)
	num := new(big.Int).Sub(y2, big.NewInt(1))
	den := new(big.Int).Mul(curveD, y2)
	den.Add(den, big.NewInt(1)).Mod(den, fieldP)
	inv := new(big.Int).ModInverse(den, fieldP)
	if inv == nil {
		return false
	}
	x2 := num.Mul(num, inv)
	x2.Mod(x2, fieldP)
	if x2.Sign() == 0 {
		return sign == 0 // x = 0 has no negative
	}
	return new(big.Int).ModSqrt(x2, fieldP) != nil
}
