package plot

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Duration writes d as people write it: 30m, 1h30m, 1.5s, 250ms, 0s (not
// time.Duration's "30m0s", nor encoding/json's 1800000000000).
func Duration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	s := d.String()
	for _, zero := range []string{"m0s", "h0m"} {
		if strings.HasSuffix(s, zero) {
			s = strings.TrimSuffix(s, zero) + zero[:1]
		}
	}
	return s
}

// ConfigJSON is v (a command's options, a run's configuration) as indented
// JSON for a page, with every time.Duration written as Duration writes it;
// fields keep their order and their json names.
func ConfigJSON(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(readable(reflect.ValueOf(v))); err != nil {
		return err.Error()
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ordered is a JSON object that keeps its keys' order.
type ordered []field

type field struct {
	key   string
	value any
}

func (o ordered) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(f.value)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

var durationType = reflect.TypeFor[time.Duration]()

// readable is v as plain values, durations as strings.
func readable(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	if v.Type() == durationType {
		return Duration(time.Duration(v.Int()))
	}
	if _, ok := v.Interface().(json.Marshaler); ok && v.Kind() != reflect.Struct {
		return v.Interface()
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return readable(v.Elem())
	case reflect.Struct:
		if _, ok := v.Interface().(json.Marshaler); ok {
			return v.Interface()
		}
		var o ordered
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			fv := v.Field(i)
			if strings.Contains(opts, "omitempty") && fv.IsZero() {
				continue
			}
			o = append(o, field{name, readable(fv)})
		}
		return o
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		m := make(map[string]any, v.Len())
		for it := v.MapRange(); it.Next(); {
			k := it.Key()
			ks := ""
			if k.Kind() == reflect.String {
				ks = k.String()
			} else {
				ks = strconv.Quote(k.String())
				if b, err := json.Marshal(k.Interface()); err == nil {
					ks = strings.Trim(string(b), `"`)
				}
			}
			m[ks] = readable(it.Value())
		}
		return m
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = readable(v.Index(i))
		}
		return out
	}
	return v.Interface()
}
