// Package nilcheck tells a nil value hidden in an interface from a usable
// one, so that exported functions can refuse a typed nil (a nil *T stored
// in an interface) with an error instead of panicking on its first use.
package nilcheck

import "reflect"

// IsNil reports whether v is nil or an interface holding a nil pointer,
// map, slice, channel or function.
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
