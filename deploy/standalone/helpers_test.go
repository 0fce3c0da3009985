package standalone

import "math/big"

func newInt(b []byte) *big.Int { return new(big.Int).SetBytes(b) }
