package efs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/efs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Outcomes passed to Observer.APICall, one per attempt.
const (
	OutcomeOK           = "ok"            // 2xx
	OutcomeThrottled    = "throttled"     // 429 or a throttling error code
	OutcomeServerError  = "server_error"  // 5xx or a server-side error code
	OutcomeClientError  = "client_error"  // any other answered error (4xx), including "not found"
	OutcomeNetworkError = "network_error" // no usable answer: refused, reset, EOF, truncated body
	OutcomeTimeout      = "timeout"       // the attempt or the caller's deadline ran out
	OutcomeCanceled     = "canceled"      // the caller canceled
	OutcomePaced        = "paced"         // not sent: client-side pacing used the time up
)

// class is what an attempt's error means: the sentinel it maps to, whether
// another attempt may succeed, and the outcome label for the Observer.
type class struct {
	sentinel error
	retry    bool
	outcome  string
}

var (
	classThrottled   = class{ErrThrottled, true, OutcomeThrottled}
	classServer      = class{ErrUnavailable, true, OutcomeServerError}
	classNetwork     = class{ErrUnavailable, true, OutcomeNetworkError}
	classTimeout     = class{ErrUnavailable, true, OutcomeTimeout}
	classCanceled    = class{ErrUnavailable, true, OutcomeCanceled}
	classUnknown     = class{ErrUnavailable, false, OutcomeNetworkError}
	classDenied      = class{ErrAccessDenied, false, OutcomeClientError}
	classBadRequest  = class{ErrBadRequest, false, OutcomeClientError}
	classAPNotFound  = class{ErrAccessPointNotFound, false, OutcomeClientError}
	classFSNotFound  = class{ErrFileSystemNotFound, false, OutcomeClientError}
	classLimit       = class{ErrLimitExceeded, false, OutcomeClientError}
	classState       = class{ErrIncorrectState, false, OutcomeClientError}
	classAlreadyUsed = class{ErrAlreadyExists, false, OutcomeClientError}
)

// byCode maps EFS (and generic AWS) error codes to classes. The service
// client only types the codes each operation's model lists (DeleteAccessPoint
// has no ThrottlingException, for instance), so the code string is the
// reliable key, not the Go type.
var byCode = map[string]class{
	"AccessPointAlreadyExists":          classAlreadyUsed,
	"AccessPointNotFound":               classAPNotFound,
	"FileSystemNotFound":                classFSNotFound,
	"AccessPointLimitExceeded":          classLimit,
	"IncorrectFileSystemLifeCycleState": classState,
	"IncorrectMountTargetState":         classState,
	"BadRequest":                        classBadRequest,
	"ValidationException":               classBadRequest,
	"InvalidParameterValue":             classBadRequest,
	"InvalidParameterCombination":       classBadRequest,
	"ThrottlingException":               classThrottled,
	"Throttling":                        classThrottled,
	"ThrottledException":                classThrottled,
	"RequestThrottled":                  classThrottled,
	"RequestThrottledException":         classThrottled,
	"TooManyRequestsException":          classThrottled,
	"RequestLimitExceeded":              classThrottled,
	"SlowDown":                          classThrottled,
	"InternalServerError":               classServer,
	"InternalFailure":                   classServer,
	"InternalError":                     classServer,
	"ServiceUnavailable":                classServer,
	"ServiceUnavailableException":       classServer,
	"DependencyTimeout":                 classServer,
	"RequestTimeout":                    classServer,
	"RequestTimeoutException":           classServer,
	"AccessDenied":                      classDenied,
	"AccessDeniedException":             classDenied,
	"UnrecognizedClientException":       classDenied,
	"InvalidClientTokenId":              classDenied,
	"InvalidSignatureException":         classDenied,
	"SignatureDoesNotMatch":             classDenied,
	"ExpiredToken":                      classDenied,
	"ExpiredTokenException":             classDenied,
	"MissingAuthenticationToken":        classDenied,
	"IncompleteSignature":               classDenied,
	"UnauthorizedOperation":             classDenied,
}

// classify decides what one attempt's error means. It never looks at
// messages: API error codes first, then the HTTP status, then the transport
// error's type.
func classify(err error) class {
	cl := classifyChain(err)
	// Credentials that cannot be loaded surface as a signing error before any
	// request is sent; unless the cause is transient, that is a permission
	// problem, not a bad request.
	var se *v4.SigningError
	if errors.As(err, &se) && !cl.retry {
		return classDenied
	}
	return cl
}

// errorCode names err for ErrorObserver: the AWS error code, else the HTTP
// status of the answer, else cl's outcome.
func errorCode(err error, cl class) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode() != "" {
		return apiErr.ErrorCode()
	}
	if code := answeredStatus(err); code > 0 {
		return strconv.Itoa(code)
	}
	return cl.outcome
}

func classifyChain(err error) class {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		if cl, ok := byCode[apiErr.ErrorCode()]; ok {
			return cl
		}
	}
	if code := answeredStatus(err); code >= 400 {
		switch {
		case code == 429:
			return classThrottled
		case code >= 500:
			return classServer
		case code == 401 || code == 403:
			return classDenied
		default:
			return classBadRequest
		}
	}
	if apiErr != nil {
		// An API error without an HTTP answer (a credential provider's,
		// for instance) that no code above names.
		return classBadRequest
	}
	var invalid smithy.InvalidParamsError
	if errors.As(err, &invalid) {
		return classBadRequest
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return classTimeout
	case errors.Is(err, context.Canceled):
		return classCanceled
	}
	if isTransportError(err) {
		return classNetwork
	}
	return classUnknown
}

// answeredStatus is the HTTP status of the answer err came with, 0 if none.
// (The SDK also wraps errors that had no answer, such as timeouts, in a
// ResponseError with status 0.)
func answeredStatus(err error) int {
	var respErr *smithyhttp.ResponseError
	if errors.As(err, &respErr) && respErr.Response != nil && respErr.Response.Response != nil {
		return respErr.HTTPStatusCode()
	}
	return 0
}

// isTransportError reports errors of the connection itself: nothing (or only
// part of an answer, or a 2xx answer whose body cannot be decoded) came back, so the request may or may not have been applied.
func isTransportError(err error) bool {
	var sendErr *smithyhttp.RequestSendError
	var deserErr *smithy.DeserializationError
	var netErr net.Error
	return errors.As(err, &sendErr) || errors.As(err, &deserErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNABORTED)
}

// wrapError builds the error returned to callers: the operation, its subject,
// the sentinel (or the *AlreadyExistsError) and the SDK's error, all
// detectable with errors.Is / errors.As, the SDK's message kept.
func (p *retryPolicy) wrapError(op, subject string, cl class, err error) error {
	sentinel := cl.sentinel
	if sentinel == ErrAlreadyExists {
		sentinel = &AlreadyExistsError{AccessPointID: p.existingID(err)}
	}
	return fmt.Errorf("%s %s: %w: %w", op, subject, sentinel, err)
}

// efsExistingID is the access point an EFS AccessPointAlreadyExists names.
func efsExistingID(err error) string {
	var typed *types.AccessPointAlreadyExists
	if errors.As(err, &typed) && typed.AccessPointId != nil {
		return *typed.AccessPointId
	}
	return ""
}
