package controller

import "errors"

// ErrNotSupported: the request asks for something this driver cannot serve
// (a backend no client is configured for); nothing was created or deleted.
var ErrNotSupported = errors.New("not supported by this driver")
