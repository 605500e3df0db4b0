package controller

import "errors"

// ErrNotSupported: the request asks for something this driver cannot serve
// (a backend no client is configured for); nothing was created or deleted.
var ErrNotSupported = errors.New("not supported by this driver")

// ErrUnimplemented: a call this driver serves for some volumes only, asked
// of another (a snapshot or clone of an S3 Files volume).
var ErrUnimplemented = errors.New("not implemented for this volume")
