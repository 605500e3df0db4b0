package emulator

import (
	"encoding/xml"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// STS on the EFS listener: the AWS query protocol as service/sts of the AWS
// SDK for Go v2 speaks it, a form-encoded POST to "/" with
// Action=AssumeRole&Version=2011-06-15 and an XML answer
// (<AssumeRoleResponse><AssumeRoleResult>...) or error
// (<ErrorResponse><Error><Code>...). Point AWS_ENDPOINT_URL_STS at the
// emulator. Only AssumeRole is served.

const stsVersion = "2011-06-15"

// AssumeRoleInput is an AssumeRole request's form, what a Hook sees.
type AssumeRoleInput struct {
	RoleArn         string
	RoleSessionName string
	ExternalId      string
	DurationSeconds int
}

// Session durations STS accepts: 15 minutes up to a role's
// MaxSessionDuration, 1 hour unless changed (the emulator's roles keep it).
const (
	minSessionDuration     = 900
	maxSessionDuration     = 3600
	defaultSessionDuration = 3600
)

type stsCredentials struct {
	AccessKeyId     string `xml:"AccessKeyId"`
	SecretAccessKey string `xml:"SecretAccessKey"`
	SessionToken    string `xml:"SessionToken"`
	Expiration      string `xml:"Expiration"`
}

type assumeRoleResponse struct {
	XMLName xml.Name `xml:"AssumeRoleResponse"`
	XMLNS   string   `xml:"xmlns,attr"`
	Result  struct {
		AssumedRoleUser struct {
			Arn           string `xml:"Arn"`
			AssumedRoleId string `xml:"AssumedRoleId"`
		} `xml:"AssumedRoleUser"`
		Credentials      stsCredentials `xml:"Credentials"`
		PackedPolicySize int            `xml:"PackedPolicySize"`
	} `xml:"AssumeRoleResult"`
	RequestID string `xml:"ResponseMetadata>RequestId,omitempty"`
}

type stsErrorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	XMLNS   string   `xml:"xmlns,attr"`
	Error   struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Error"`
	RequestID string `xml:"RequestId"`
}

const stsXMLNS = "https://sts.amazonaws.com/doc/2011-06-15/"

// stsCode is an error's code and status as STS answers them; the emulator's
// shared errors (faults, authentication) are spelt as EFS's.
func stsCode(e *apiError) (code string, status int) {
	switch e.ErrorCode {
	case codeThrottling:
		return "Throttling", http.StatusBadRequest // STS throttles with 400
	case codeInternal:
		return "InternalFailure", http.StatusInternalServerError
	case codeUnrecognizedClient:
		return "InvalidClientTokenId", http.StatusForbidden
	case codeExpiredToken:
		return "ExpiredToken", http.StatusForbidden
	case codeAccessDenied:
		return "AccessDenied", http.StatusForbidden
	case codeBadRequest:
		return "ValidationError", http.StatusBadRequest
	}
	return e.ErrorCode, e.Status
}

// stsProtocol writes answers as STS's XML.
var stsProtocol = protocol{
	writeError: func(w http.ResponseWriter, e *apiError) {
		var out stsErrorResponse
		out.XMLNS = stsXMLNS
		code, status := stsCode(e)
		out.Error.Type = "Sender"
		if status >= 500 {
			out.Error.Type = "Receiver"
		}
		out.Error.Code, out.Error.Message = code, e.Message
		out.RequestID = w.Header().Get("x-amzn-RequestId")
		writeXML(w, status, out)
	},
	writeOK: func(w http.ResponseWriter, status int, body any) { writeXML(w, status, body) },
}

func writeXML(w http.ResponseWriter, status int, body any) {
	b, err := xml.Marshal(body)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte("<ErrorResponse><Error><Code>InternalFailure</Code></Error></ErrorResponse>")
	}
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// isSTS tells an STS request from an EFS one: the service of its SigV4
// credential scope, or for an unsigned request a form POST to "/" with an
// Action. EFS's requests are signed for elasticfilesystem and go under
// /2015-02-01/.
func isSTS(r *http.Request) bool {
	if r.Method != http.MethodPost || r.URL.Path != "/" {
		return false
	}
	if _, service := sigV4Scope(r.Header.Get("Authorization")); service != "" {
		return service == "sts"
	}
	return strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded")
}

// serveSTS answers an STS request: its operation from the form's Action.
func (e *Emulator) serveSTS(w http.ResponseWriter, r *http.Request) {
	form, aerr := readForm(r)
	if aerr == nil && form.Get("Action") != string(OpAssumeRole) {
		aerr = errorf(http.StatusBadRequest, "InvalidAction", "Could not find operation %q for version %s", form.Get("Action"), form.Get("Version"))
	}
	if aerr != nil {
		rec := &recorder{ResponseWriter: w}
		stsProtocol.writeError(rec, aerr)
		e.logRequest(r, "", rec, time.Now(), "")
		return
	}
	e.serveOp(w, r, OpAssumeRole, stsProtocol, func(r *http.Request) (request, *apiError) { return e.decodeAssumeRole(r, form) })
}

func readForm(r *http.Request) (url.Values, *apiError) {
	r.Body = http.MaxBytesReader(nil, r.Body, maxBodyBytes)
	if err := r.ParseForm(); err != nil {
		return nil, badRequest("malformed form body: %v", err)
	}
	return r.PostForm, nil
}

func (e *Emulator) decodeAssumeRole(r *http.Request, form url.Values) (request, *apiError) {
	in := &AssumeRoleInput{RoleArn: form.Get("RoleArn"), RoleSessionName: form.Get("RoleSessionName"),
		ExternalId: form.Get("ExternalId"), DurationSeconds: defaultSessionDuration}
	if v := form.Get("Version"); v != stsVersion {
		return request{}, badRequest("Version %q: want %s", v, stsVersion)
	}
	if _, _, err := parseRole(Role{ARN: in.RoleArn}); err != nil {
		return request{}, badRequest("%v", err)
	}
	if !sessionNameRE.MatchString(in.RoleSessionName) {
		return request{}, badRequest("RoleSessionName %q must be 2 to 64 characters of [\\w+=,.@-]", in.RoleSessionName)
	}
	if form.Has("ExternalId") && !validExternalID(in.ExternalId) {
		return request{}, badRequest("ExternalId must be 2 to 1224 characters of [\\w+=,.@:/-]")
	}
	if s := form.Get("DurationSeconds"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < minSessionDuration {
			return request{}, badRequest("DurationSeconds %q: must be at least %d", s, minSessionDuration)
		}
		if n > maxSessionDuration {
			return request{}, badRequest("The requested DurationSeconds exceeds the MaxSessionDuration set for this role.")
		}
		in.DurationSeconds = n
	}
	who := callerFrom(r.Context())
	return request{in: in, iam: iamFacts{arn: in.RoleArn}, run: func() (int, any, *apiError) {
		s, aerr := e.accounts.assumeRole(in, who, e.Now(), e.rand)
		if aerr != nil {
			return 0, nil, aerr
		}
		var out assumeRoleResponse
		out.XMLNS = stsXMLNS
		out.Result.AssumedRoleUser.Arn = s.assumedRoleARN()
		out.Result.AssumedRoleUser.AssumedRoleId = "AROA" + strings.ToUpper(e.rand.hex(17)) + ":" + s.SessionName
		out.Result.Credentials = stsCredentials{AccessKeyId: s.AccessKeyID, SecretAccessKey: s.Secret,
			SessionToken: s.SessionToken, Expiration: s.Expires.Format(time.RFC3339)}
		return http.StatusOK, &out, nil
	}}, nil
}
