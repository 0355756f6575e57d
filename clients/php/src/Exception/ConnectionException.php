<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * ConnectionException: no HTTP answer reached the client (connection refused or
 * reset, a timeout, a name that does not resolve), and retrying within the
 * client's retry budget did not help. `status` is 0.
 */
class ConnectionException extends UnavailableException
{
}
