// Package sentinel holds the values of package lock's sentinel errors,
// which lock documents and exports under its own names (lock.ErrLost is
// Lost), so that the packages below lock can wrap them.
package sentinel

import "errors"

// The values of lock's Err<Name> (ErrInvalidConfig is fencing's too) and
// of fencing.ErrInvalidToken.
var (
	Locked        = errors.New("locked by another holder")
	NotHeld       = errors.New("not held")
	Lost          = errors.New("lease lost")
	Released      = errors.New("lease released")
	Closed        = errors.New("locker closed")
	Incompatible  = errors.New("incompatible request")
	Permission    = errors.New("permission denied")
	InvalidName   = errors.New("invalid name")
	InvalidConfig = errors.New("invalid configuration")
	InvalidToken  = errors.New("invalid token")
)
