package report

import "errors"

func asError(err error, pe **Error) bool { return errors.As(err, pe) }
