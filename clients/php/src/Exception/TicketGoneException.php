<?php

declare(strict_types=1);

namespace Baton\Exception;

/**
 * The fair-queue ticket is gone: it expired for want of a poll, was cancelled, or is unknown (`410 ticket-gone`).
 */
class TicketGoneException extends BatonException
{
}
