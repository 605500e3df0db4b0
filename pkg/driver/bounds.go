package driver

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/efs-csi/efs-csi-driver/pkg/controller"
)

// Size limits on request fields, checked before any service code runs, so
// that no oversized string reaches EFS, a path, a lock table or a log line.
// The CSI spec recommends 128 bytes for names and IDs and 4 KiB for each map
// (parameters, secrets, contexts); paths get Linux's PATH_MAX.
const (
	maxStringField = 128
	maxPathField   = 4096
	maxMapBytes    = 4096
	maxRepeated    = 64 // capabilities, mount flags
)

// checkBounds walks a CSI request and reports the first field over its
// limit as controller.ErrInvalidRequest (INVALID_ARGUMENT). Field names in
// the error are the proto names; values are never echoed (they may be
// secrets).
func checkBounds(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	return checkMessage(m.ProtoReflect(), "")
}

func checkMessage(m protoreflect.Message, prefix string) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + string(fd.Name())
		switch {
		case fd.IsMap():
			err = checkMap(name, fd, v.Map())
		case fd.IsList():
			err = checkList(name, fd, v.List())
		default:
			err = checkValue(name, fd, v)
		}
		return err == nil
	})
	return err
}

func checkMap(name string, fd protoreflect.FieldDescriptor, m protoreflect.Map) error {
	total := 0
	m.Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
		total += len(k.String())
		if fd.MapValue().Kind() == protoreflect.StringKind {
			total += len(v.String())
		}
		return total <= maxMapBytes
	})
	if total > maxMapBytes {
		return fmt.Errorf("%w: %s exceeds %d bytes", controller.ErrInvalidRequest, name, maxMapBytes)
	}
	return nil
}

func checkList(name string, fd protoreflect.FieldDescriptor, l protoreflect.List) error {
	if l.Len() > maxRepeated {
		return fmt.Errorf("%w: %s has %d entries, at most %d", controller.ErrInvalidRequest, name, l.Len(), maxRepeated)
	}
	for i := range l.Len() {
		if err := checkValue(fmt.Sprintf("%s[%d]", name, i), fd, l.Get(i)); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(name string, fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind:
		n, limit := len(v.String()), maxStringField
		if fd.Kind() == protoreflect.BytesKind {
			n = len(v.Bytes())
		}
		if strings.HasSuffix(string(fd.Name()), "_path") {
			limit = maxPathField
		}
		if n > limit {
			return fmt.Errorf("%w: %s is %d bytes, at most %d", controller.ErrInvalidRequest, name, n, limit)
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return checkMessage(v.Message(), name+".")
	}
	return nil
}
