package fencing_test

import (
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/fencing"
)

// A holder with token 8 writes; a paused holder whose grant (token 7) ended
// before 8 was granted wakes up and tries to write. The Guard refuses it.
func ExampleGuard() {
	var g fencing.Guard
	balance := 0
	write := func(tok fencing.Token, amount int) error {
		return g.Apply("account/42", tok, func() error {
			balance = amount
			return nil
		})
	}
	fmt.Println(write(8, 100))
	err := write(7, 50)
	fmt.Println(err)
	fmt.Println(errors.Is(err, fencing.ErrStaleToken), balance)
	// Output:
	// <nil>
	// fencing: stale token 7 for "account/42": highest accepted is 8
	// true 100
}
